package gust

import "github.com/gustws/gust/internal/netpoll"

// pollerConns returns how many connections gust's event loops hold
// (netpoll mode). The tests that check a connection leaves nothing behind
// ask it, so that this is the one place in the tests that knows how the
// loops keep their connections.
func pollerConns() int { return netpoll.Conns() }
