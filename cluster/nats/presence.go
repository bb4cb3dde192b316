package gustnats

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust/hub"
)

// DefaultPresenceSubject is the subject prefix NewPresence uses for "".
const DefaultPresenceSubject = "gust.presence"

// PresenceOptions configures a Presence made with [NewPresence]. A nil
// *PresenceOptions means the zero value; a zero field means its default.
type PresenceOptions struct {
	// Subject is the prefix of the presence subjects (see the package
	// doc); instances that share presence use the same. It must not lie
	// below a Broker's subject (a Broker subscribed to subject.> would take
	// presence messages for its own). Default DefaultPresenceSubject.
	Subject string

	// Heartbeat is how often the instance tells the others it is alive:
	// N instances cost N*N NATS deliveries per Heartbeat. Default 1 s.
	Heartbeat time.Duration

	// Expiry is how long an instance may stay unheard before the others
	// drop its members, firing their leaves: the longest a killed
	// instance's members linger. It must exceed Heartbeat. Default
	// 3 × Heartbeat.
	Expiry time.Duration

	// SnapshotTimeout bounds how long Join and Watch wait, when they make
	// the instance follow a topic, for the other instances' members of it;
	// an answer that comes later still counts, as joins. Default 250 ms.
	SnapshotTimeout time.Duration

	// ResumeGrace is how long an instance that finds it has not run for a
	// while (stopped by SIGSTOP or a paused container, or starved: its
	// goroutine late by Heartbeat, or by Expiry-Heartbeat if less) holds
	// its members back from the instances that ask for them, as the others
	// do once they have dropped it as unheard: the connections that closed
	// while it was stopped are seen closed first, and their members are not
	// announced again only to leave. The members still there are missing
	// from the others' views that much longer. Default Heartbeat; it should
	// cover the time a wake-up takes to see its closed connections closed,
	// which grows with the connections per instance.
	ResumeGrace time.Duration

	// Logger receives a Warn record for each presence message that cannot
	// be decoded and for each instance dropped as unheard, an Info record
	// when the instance asks the others again after a reconnect or lost
	// messages, and when it holds its members back after a stop. Default slog.Default(), as it is when the record is made.
	Logger *slog.Logger
}

// Presence is a hub.Presence shared by the instances on a NATS server:
// each instance (a Presence on its own connection) tells the others of its
// members, and each one's view, which Members lists and Watch reports, is
// the union of all.
//
// # Subjects
//
// Below Subject (S, default gust.presence): S.hb carries every instance's
// heartbeats and goodbye, S.q the question of an instance that starts
// following a topic ("your members of it?"), S.i.<instance> what is sent
// to one instance (answers, replies to a hello), and S.t.<topic> a topic's
// joins and leaves, the topic escaped as a Broker's subjects are. An
// instance subscribes to S.t.<topic> only while it follows the topic: while
// it has a member in it or a watcher of it.
//
// # Cost in NATS messages
//
// With N instances, F of which follow a topic:
//   - a member's first join to a topic on an instance, and its last leave
//     there: one message, F deliveries (joins counted on one instance, a
//     second tab, cost nothing);
//   - an instance starting to follow a topic: one question, N deliveries,
//     and N-1 answers (several messages for lists past 32 KiB);
//   - heartbeats: N messages and N×N deliveries per Heartbeat (ten
//     instances at the default 1 s: 100 deliveries a second);
//   - a start: a hello, N deliveries, N-1 replies; a reconnect: the same,
//     plus a question about every topic it follows to every instance, and
//     one from each instance that follows topics;
//   - Close: one goodbye, N deliveries.
//
// An instance holds the members of the other instances for the topics it
// follows only.
//
// # Consistency and failures
//
// An instance's messages reach the others in the order it sent them, and
// its answer to a question is its members at one moment, so the views
// converge; a change reaches another view one NATS hop later.
//   - Join and Watch, when they start following a topic, wait until every
//     instance known alive has answered (and, just after a start or a
//     reconnect, until SnapshotTimeout has passed, for the instances not
//     heard yet), SnapshotTimeout at most; a later answer counts, as joins.
//   - An instance that dies without Close (kill -9, a crash, a cut
//     network) is dropped, with a leave for each of its members, Expiry
//     after the others last heard it. When a cut network heals, each side
//     hears an instance it does not know and asks it for its members: they
//     come back, as joins.
//   - An instance that does not run for a while (SIGSTOP, a paused
//     container, a starved process) hears nothing meanwhile: the time its
//     goroutine ran late (past half a Heartbeat, a busy machine's timer) is
//     not counted as the others' silence, so it drops none of them for it. Stopped past Expiry, it was dropped by the
//     others, with a leave for each of its members; on waking (its goroutine
//     late by Heartbeat, or by Expiry-Heartbeat if less) it holds its
//     answers back for ResumeGrace, so that the connections that closed
//     while it was stopped are seen closed first: the others get joins for
//     the members still there only, after the grace. Its joins and leaves go
//     out at once meanwhile. The grace is a bound, not knowledge: a
//     connection seen closed later (a client gone without a FIN waits for
//     the read deadline) is announced, then leaves; an instance that starts
//     following a topic during the grace gets this one's members late, as
//     joins; a stop the monotonic clock does not count (a suspended host) is
//     not noticed, and the members are announced at once, as before.
//   - While its NATS connection is down, an instance keeps its own members
//     and the others' (it cannot hear them, which proves nothing), and
//     nats.go reconnects by itself. Back, it starts a new epoch: it asks
//     every instance for their members of its topics, and the others,
//     hearing the new epoch, ask it for its own, which makes good the
//     changes lost either way (those made while away, past nats.go's
//     reconnect buffer). Others that stayed connected drop it after Expiry
//     meanwhile, and take its members back then. If the connection closes
//     for good, the others' members leave the view; Join and Leave report
//     nats.ErrConnectionClosed.
//   - Messages lost to a full queue (65,536 messages, nats.ErrSlowConsumer)
//     are noticed at the next heartbeat: the instance asks every instance
//     again.
//   - Close says goodbye: the others drop the instance's members at once.
//
// Heartbeat trades messages for how soon a dead instance is noticed;
// Expiry must leave room for a heartbeat delayed by a busy process or
// network, or a live instance's members leave and come back.
//
// A Presence is safe for concurrent use. Close it before closing its
// connection.
type Presence struct {
	nc              *nats.Conn
	id              string
	prefix          string // Subject + "."
	inbox           string // this instance's subject: answers, queries to it
	heartbeat       time.Duration
	expiry          time.Duration
	snapshotTimeout time.Duration
	resumeGrace     time.Duration
	lateLimit       time.Duration // a run this late holds the answers back
	logger          *slog.Logger
	view            hub.LocalPresence // the union; fires the events

	ch     chan *nats.Msg   // every subscription's messages, in arrival order
	status chan nats.Status // CONNECTED and CLOSED
	wake   chan struct{}    // run recomputes its timer
	done   chan struct{}    // closed by Close
	exited chan struct{}    // closed when run returns

	mu         sync.Mutex
	closed     bool
	connClosed bool
	epoch      uint64
	reconnects uint64
	dropped    int
	subs       []*nats.Subscription // heartbeats, queries, inbox
	topics     map[string]*followed
	peers      map[string]*peer
	queries    map[uint64]*query
	qid        uint64
	discover   time.Time // until then a follow waits for peers not yet heard
	nextBeat   time.Time
	wakeAt     time.Time   // when run means to run next, at the latest
	holdUntil  time.Time   // answers wait until then (see caughtUp)
	held       []heldQuery // the questions waiting for holdUntil
}

// followed is a topic the instance follows: it has local members or
// watchers, and a subscription to the topic's subject.
type followed struct {
	sub      *nats.Subscription
	local    map[string]int // member -> joins on this instance
	watchers int
	ready    chan struct{} // closed once the first snapshot is in or timed out
}

var _ hub.Presence = (*Presence)(nil)

// msgLimit bounds the size of the query and state messages the instance
// sends (below NATS's 1 MiB default payload limit), splitting long lists.
const msgLimit = 32 << 10

// NewPresence starts a Presence on nc: it subscribes to the presence
// subjects, says hello to the other instances, and heartbeats from a
// goroutine that Close ends. The caller keeps nc and closes it after Close.
func NewPresence(nc *nats.Conn, opts *PresenceOptions) (*Presence, error) {
	var o PresenceOptions
	if opts != nil {
		o = *opts
	}
	if o.Subject == "" {
		o.Subject = DefaultPresenceSubject
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = time.Second
	}
	if o.Expiry == 0 {
		o.Expiry = 3 * o.Heartbeat
	}
	if o.SnapshotTimeout == 0 {
		o.SnapshotTimeout = 250 * time.Millisecond
	}
	if o.ResumeGrace == 0 {
		o.ResumeGrace = o.Heartbeat
	}
	if o.Heartbeat < 0 || o.SnapshotTimeout < 0 || o.ResumeGrace < 0 || o.Expiry <= o.Heartbeat {
		return nil, errors.New("gustnats: PresenceOptions: Heartbeat, SnapshotTimeout and ResumeGrace must be positive, Expiry longer than Heartbeat")
	}
	var id [8]byte
	rand.Read(id[:])
	p := &Presence{
		nc:              nc,
		id:              hex.EncodeToString(id[:]),
		prefix:          o.Subject + ".",
		heartbeat:       o.Heartbeat,
		expiry:          o.Expiry,
		snapshotTimeout: o.SnapshotTimeout,
		resumeGrace:     o.ResumeGrace,
		lateLimit:       min(o.Heartbeat, o.Expiry-o.Heartbeat),
		logger:          o.Logger,
		ch:              make(chan *nats.Msg, queueSize),
		wake:            make(chan struct{}, 1),
		done:            make(chan struct{}),
		exited:          make(chan struct{}),
		topics:          make(map[string]*followed),
		peers:           make(map[string]*peer),
		queries:         make(map[uint64]*query),
	}
	p.inbox = p.prefix + "i." + p.id
	p.status = nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	for _, subject := range []string{p.prefix + "hb", p.prefix + "q", p.inbox} {
		sub, err := nc.ChanSubscribe(subject, p.ch)
		if err != nil {
			for _, s := range p.subs {
				s.Unsubscribe()
			}
			nc.RemoveStatusListener(p.status)
			return nil, err
		}
		p.subs = append(p.subs, sub)
	}
	now := time.Now()
	p.reconnects = nc.Stats().Reconnects
	p.discover = now.Add(p.snapshotTimeout)
	p.nextBeat = now.Add(p.heartbeat)
	p.wakeAt = p.nextBeat // run's first timer
	p.publish(p.prefix+"hb", encodeHeartbeat(p.id, p.epoch, true))
	go p.run()
	return p, nil
}

// ID returns the instance's ID, random per Presence: the one its messages
// carry and the others' logs name.
func (p *Presence) ID() string { return p.id }

// Join adds member to topic on this instance and tells the other
// instances. When it makes the instance follow topic (its first member or
// watcher here), it waits up to SnapshotTimeout for the others' members of
// topic, so that Members lists them once it returns. Its error, with the
// member joined locally, says the join could not be sent (the connection
// closed, or nats.go's reconnect buffer is full); the others learn of it
// when the connection is back, if it comes back. It fails without joining
// only when it cannot subscribe to the topic's subject.
func (p *Presence) Join(topic, member string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return hub.ErrClosed
	}
	t, err := p.follow(topic)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	t.local[member]++
	if t.local[member] == 1 {
		p.view.Join(topic, member)
		err = p.publish(p.topicSubject(topic), encodeChange(kindJoin, p.id, p.epoch, topic, member))
	}
	ready := t.ready
	p.mu.Unlock()
	p.waitReady(ready)
	return err
}

// Leave undoes one Join; the last one of member here tells the others. Its
// error says the leave could not be sent, as Join's.
func (p *Presence) Leave(topic, member string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return hub.ErrClosed
	}
	t := p.topics[topic]
	if t == nil || t.local[member] == 0 {
		return nil
	}
	if t.local[member]--; t.local[member] > 0 {
		return nil
	}
	delete(t.local, member)
	p.view.Leave(topic, member)
	err := p.publish(p.topicSubject(topic), encodeChange(kindLeave, p.id, p.epoch, topic, member))
	p.unfollowIfIdle(topic, t)
	return err
}

// Members appends topic's members across the instances, sorted, to dst. It
// knows the topics this instance follows, those with a member or a watcher
// here; for another topic it returns dst: Watch it first.
func (p *Presence) Members(dst []string, topic string) []string {
	return p.view.Members(dst, topic)
}

// Watch calls f with the changes of topic's members across the instances
// (see hub.Presence). When it makes the instance follow topic, it first
// waits up to SnapshotTimeout for the others' members, which then are in
// Members and not told to f; members whose instance answers later reach f
// as joins.
func (p *Presence) Watch(topic string, f func(hub.PresenceEvent)) (stop func(), err error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, hub.ErrClosed
	}
	t, err := p.follow(topic)
	if err != nil {
		p.mu.Unlock()
		return nil, err
	}
	t.watchers++
	ready := t.ready
	p.mu.Unlock()
	p.waitReady(ready)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, hub.ErrClosed
	}
	stopView, err := p.view.Watch(topic, f)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			stopView()
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.closed {
				t.watchers--
				p.unfollowIfIdle(topic, t)
			}
		})
	}, nil
}

// Close tells the other instances that this one is gone, so that they drop
// its members at once (waiting up to SnapshotTimeout for the NATS server to
// have the message), ends the watches and the heartbeat goroutine, and
// unsubscribes. It returns the error of sending the goodbye, nil when the
// connection had closed already (the others then drop the members after
// Expiry).
func (p *Presence) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var err error
	if !p.connClosed {
		for _, t := range p.topics {
			t.sub.Unsubscribe()
		}
		for _, s := range p.subs {
			s.Unsubscribe()
		}
		err = p.publish(p.prefix+"hb", encodeBye(p.id, p.epoch))
	}
	for _, q := range p.queries {
		p.finish(q)
	}
	p.held = nil
	p.mu.Unlock()
	close(p.done)
	<-p.exited
	p.nc.RemoveStatusListener(p.status)
	p.view.Close()
	if err == nil && p.nc.IsConnected() {
		err = p.nc.FlushTimeout(p.snapshotTimeout)
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		err = nil
	}
	return err
}

func (p *Presence) topicSubject(topic string) string {
	return p.prefix + "t." + encodeTopic(topic)
}

// publish sends data on subject; p.mu held, so that the instance's
// messages leave in the order of its changes (nats.go only buffers).
func (p *Presence) publish(subject string, data []byte) error {
	return p.nc.Publish(subject, data)
}

// waitReady waits for a topic's first snapshot, SnapshotTimeout at most.
func (p *Presence) waitReady(ready chan struct{}) {
	t := time.NewTimer(p.snapshotTimeout)
	defer t.Stop()
	select {
	case <-ready:
	case <-p.done:
	case <-t.C:
	}
}

// follow returns topic's entry, subscribing and asking the others for
// their members when the instance starts following it; p.mu held.
func (p *Presence) follow(topic string) (*followed, error) {
	if t := p.topics[topic]; t != nil {
		return t, nil
	}
	sub, err := p.nc.ChanSubscribe(p.topicSubject(topic), p.ch)
	if err != nil {
		return nil, err
	}
	t := &followed{sub: sub, local: make(map[string]int), ready: make(chan struct{})}
	p.topics[topic] = t
	// The subscription goes to the server before the query, so that every
	// change an instance sends after its answer reaches this one.
	msgs, qids := encodeQueries(p.id, p.epoch, []string{topic}, msgLimit, p.nextQID)
	now := time.Now()
	q := &query{wait: make(map[string]struct{}, len(p.peers)), deadline: now.Add(p.snapshotTimeout), ready: t.ready}
	for id := range p.peers {
		q.wait[id] = struct{}{}
	}
	p.queries[qids[0]] = q
	if p.connClosed || !p.nc.IsConnected() || p.nc.PublishRequest(p.prefix+"q", p.inbox, msgs[0]) != nil {
		p.finish(q) // nobody can answer now; the reconnect asks again
	}
	p.check(q, now)
	p.poke()
	return t, nil
}

// unfollowIfIdle stops following a topic with neither a local member nor
// a watcher, forgetting the others' members of it; p.mu held.
func (p *Presence) unfollowIfIdle(topic string, t *followed) {
	if len(t.local) > 0 || t.watchers > 0 || p.topics[topic] != t {
		return
	}
	t.sub.Unsubscribe()
	delete(p.topics, topic)
	for _, pr := range p.peers {
		for m := range pr.topics[topic] {
			p.view.Leave(topic, m)
		}
		delete(pr.topics, topic)
		delete(pr.partial, topic)
	}
}
