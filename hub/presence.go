package hub

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Presence tells who is in a topic: members are IDs the application
// chooses (a user name, an account or device ID) and joins to topics (a
// room, a document), independent of the Hub's subscriptions. [LocalPresence]
// serves one process; the cluster/nats module's Presence spans every
// process on a NATS server, so that a chat room lists its members whatever
// instance each is connected to.
//
// Joins are counted: a member joined twice on one instance (two tabs) stays
// until it has left twice, and a member joined on several instances is one
// member of the topic until it has left every one. A watcher hears of a
// member when it first appears in the topic and when it finally leaves, not
// of each join.
//
// A Presence is a view: each instance holds its own, and the events it
// fires are about its own view changing. Every instance that watches a
// topic gets each event, so a chat server tells its local connections of a
// join (Hub.AppendSubscribers, a gust.PreparedMessage, WritePreparedAsync),
// not every instance's through the Broker, which would repeat the notice
// once per instance.
//
// To show a list and keep it current without a gap, Join or Watch first
// and read Members then: a change made between the two calls is in the list
// and reaches the watcher too, so apply events as set operations.
//
// Implementations are safe for concurrent use.
type Presence interface {
	// Join adds member to topic on this instance. Its error says the other
	// instances may not have heard of the join (the local view has it).
	Join(topic, member string) error

	// Leave undoes one Join of member to topic; a member that was not
	// joined is no error. Its error says the other instances may not have
	// heard of it.
	Leave(topic, member string) error

	// Members appends the members of topic, sorted, to dst and returns the
	// extended slice: a snapshot of this instance's view, which lists the
	// members of every instance for the topics it follows (those it has
	// members in or watches).
	Members(dst []string, topic string) []string

	// Watch calls f with each change of topic's members from now until
	// stop is called. Calls to f are made from one goroutine at a time, in
	// the order of the changes, never from the goroutine that made the
	// change, so f may call the Presence; it should return soon, since the
	// changes of every topic wait for it. Once stop has returned, f is not
	// called again, except by a call under way.
	Watch(topic string, f func(PresenceEvent)) (stop func(), err error)

	// Close leaves every topic on behalf of this instance's members and
	// ends the watches; after it, the other methods return ErrClosed (and
	// Members dst).
	Close() error
}

// PresenceEvent is a change of a topic's members, as a [Presence] sees it.
type PresenceEvent struct {
	Topic  string
	Member string
	// Joined is true when Member appeared in Topic, false when it left.
	Joined bool
}

// LocalPresence is the [Presence] of one process. Its zero value is ready
// to use; it is safe for concurrent use and must not be copied after first
// use. Watchers are called from a goroutine that it starts when a change
// has watchers and that ends once they have been told, so an idle
// LocalPresence holds none.
type LocalPresence struct {
	closed atomic.Bool

	mu      sync.Mutex
	topics  map[string]*presenceTopic
	queue   []presenceDelivery // changes not yet told to their watchers
	running bool               // a deliver goroutine is draining queue
}

type presenceTopic struct {
	members map[string]int // member -> joins
	// sorted holds the members in order, kept so on each first join and
	// last leave (a binary search and a move of the slice's headers): a
	// crowd that joins a room, each member asking for the list, cost a
	// sort of the room per join.
	sorted []string
	// watchers is copied on write: a queued change keeps the watchers of
	// its time, so a watcher added later never hears of it. A stopped
	// watcher stays in it until stopped ones are half of it (then it is
	// copied without them): stopping is not a copy of the topic's watchers
	// each, which made a room that everyone leaves at once cost the square
	// of its size.
	watchers []*presenceWatcher
	stopped  int // stopped watchers in watchers
}

type presenceWatcher struct {
	f       func(PresenceEvent)
	t       *presenceTopic // its topic's entry, which stays while it watches
	stopped atomic.Bool
}

type presenceDelivery struct {
	ev PresenceEvent
	to []*presenceWatcher
}

var _ Presence = (*LocalPresence)(nil)

// NewLocalPresence returns an empty LocalPresence.
func NewLocalPresence() *LocalPresence { return new(LocalPresence) }

// Join adds member to topic; the first join tells topic's watchers.
func (p *LocalPresence) Join(topic, member string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	t := p.topic(topic)
	t.members[member]++
	if t.members[member] == 1 {
		i, _ := slices.BinarySearch(t.sorted, member)
		t.sorted = slices.Insert(t.sorted, i, member)
		p.notify(t, PresenceEvent{Topic: topic, Member: member, Joined: true})
	}
	return nil
}

// Leave undoes one Join; the last leave tells topic's watchers.
func (p *LocalPresence) Leave(topic, member string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	t := p.topics[topic]
	if t == nil || t.members[member] == 0 {
		return nil
	}
	if t.members[member]--; t.members[member] > 0 {
		return nil
	}
	delete(t.members, member)
	if i, ok := slices.BinarySearch(t.sorted, member); ok {
		t.sorted = slices.Delete(t.sorted, i, i+1)
		if cap(t.sorted) > 64 && len(t.sorted) < cap(t.sorted)/4 {
			t.sorted = slices.Clone(t.sorted) // give back what a crowd that left used
		}
	}
	p.notify(t, PresenceEvent{Topic: topic, Member: member})
	p.drop(topic, t)
	return nil
}

// PresenceStats counts a Presence's topics with members and its members,
// each counted once per topic.
type PresenceStats struct {
	Topics, Members int
}

// Stats returns p's counts now.
func (p *LocalPresence) Stats() PresenceStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PresenceStats{Topics: len(p.topics)}
	for _, t := range p.topics {
		st.Members += len(t.members)
	}
	return st
}

// Members appends topic's members, sorted, to dst.
func (p *LocalPresence) Members(dst []string, topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.topics[topic]; t != nil {
		dst = append(dst, t.sorted...)
	}
	return dst
}

// Watch calls f with topic's changes until stop is called (see
// [Presence]).
func (p *LocalPresence) Watch(topic string, f func(PresenceEvent)) (stop func(), err error) {
	w := &presenceWatcher{f: f}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	t := p.topic(topic)
	w.t = t
	t.watchers = append(slices.Clip(t.watchers), w)
	var once sync.Once
	return func() { once.Do(func() { p.unwatch(topic, w) }) }, nil
}

func (p *LocalPresence) unwatch(topic string, w *presenceWatcher) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Marked under the lock: a compaction under way drops a watcher it sees
	// stopped, and must not see one whose stop is still to be counted.
	if w.stopped.Swap(true) {
		return // stopped already
	}
	t := p.topics[topic]
	if t == nil || t != w.t { // Close forgot it
		return
	}
	if t.stopped++; 2*t.stopped >= len(t.watchers) {
		live := make([]*presenceWatcher, 0, len(t.watchers)-t.stopped)
		for _, x := range t.watchers {
			if !x.stopped.Load() {
				live = append(live, x)
			}
		}
		t.watchers, t.stopped = live, 0
	}
	p.drop(topic, t)
}

// Close forgets every member and watcher; changes not yet told are
// dropped, and a watcher's call under way is not waited for.
func (p *LocalPresence) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed.Store(true)
	p.topics, p.queue = nil, nil
	return nil
}

// topic returns topic's entry, made if missing; p.mu held.
func (p *LocalPresence) topic(topic string) *presenceTopic {
	t := p.topics[topic]
	if t == nil {
		if p.topics == nil {
			p.topics = make(map[string]*presenceTopic)
		}
		t = &presenceTopic{members: make(map[string]int)}
		p.topics[topic] = t
	}
	return t
}

// drop forgets a topic with no member and no watcher; p.mu held.
func (p *LocalPresence) drop(topic string, t *presenceTopic) {
	if len(t.members) == 0 && len(t.watchers) == t.stopped {
		delete(p.topics, topic)
	}
}

// notify queues ev for t's watchers and starts the deliver goroutine if
// none runs; p.mu held.
func (p *LocalPresence) notify(t *presenceTopic, ev PresenceEvent) {
	if len(t.watchers) == t.stopped {
		return
	}
	p.queue = append(p.queue, presenceDelivery{ev: ev, to: t.watchers})
	if !p.running {
		p.running = true
		go p.deliver()
	}
}

// deliver tells the queued changes to their watchers, in order, and ends
// when the queue is empty or the LocalPresence closed.
func (p *LocalPresence) deliver() {
	for {
		p.mu.Lock()
		batch := p.queue
		p.queue = nil
		if len(batch) == 0 || p.closed.Load() {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for _, d := range batch {
			for _, w := range d.to {
				if p.closed.Load() {
					break
				}
				if !w.stopped.Load() {
					w.f(d.ev)
				}
			}
		}
	}
}
