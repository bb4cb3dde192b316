package gust

// pollerConns returns how many connections gust's epoll poller holds
// (netpoll mode). The tests that check a connection leaves nothing behind
// ask it, so that this is the one place in the tests that knows how the
// poller keeps its connections.
func pollerConns() int {
	thePoller.mu.Lock()
	defer thePoller.mu.Unlock()
	return len(thePoller.conns)
}
