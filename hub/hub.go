// Package hub sends messages to the gust connections subscribed to a topic,
// or to every connection it holds, without ever blocking the publisher on a
// slow socket; with a [Broker], to the connections of other processes too.
//
// A [Hub] is built on the connection's outbox ([gust.Conn.WritePreparedAsync]):
// how much an outbox holds and what happens when it is full belong to the
// connection, so set gust.Options.OutboxSize and OutboxPolicy on the
// Upgrader, Server or Dial whose connections you publish to — usually
// gust.OutboxCloseSlow, which closes a connection that cannot keep up with
// 1008 (policy violation). The Hub counts what the outboxes refused or
// discarded in [Stats].
package hub

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gustws/gust"
)

// Options configures a Hub made with [New]. A nil *Options means the zero
// value.
type Options struct {
	// Broker, when set, carries what is published to the Hubs of other
	// processes, and delivers what they publish to this Hub's connections.
	// Default nil: the Hub is local to the process.
	Broker Broker

	// Logger receives a record at level Warn for each message from the
	// Broker that the Hub cannot decode, with its "topic" and the "err" as
	// attributes. Default: slog.Default(), as it is when the record is
	// made.
	Logger *slog.Logger

	// Frame, with a HistoryBroker, makes the WebSocket message that a
	// connection receives for each Notice: a message with its topic
	// sequence, a gap, the end of a recovery. It appends to dst and returns
	// the result and its opcode. Default: [FrameJSON]. Without a
	// HistoryBroker the Hub sends payloads as they were published and does
	// not call it.
	Frame func(dst []byte, n Notice) ([]byte, gust.Opcode)
}

// ErrClosed is returned by the methods of a Hub, or of a Presence, after
// Close.
var ErrClosed = errors.New("gust: hub closed")

// Hub sends messages to the connections subscribed to a topic, or to every
// connection it holds, without ever blocking the publisher on a slow
// socket.
//
// Each message is framed once (a [gust.PreparedMessage]) and queued in the
// outbox of each receiving connection ([gust.Conn.WritePreparedAsync]),
// whose writer goroutine writes what is queued, all of a batch in one
// system call, and exits when the outbox is empty, so an idle subscriber
// costs no goroutine; a message for an empty outbox is written at once by
// the publisher, unless it follows the previous one back to back (see
// WritePreparedAsync). A connection whose outbox is full meets its own
// gust.Options.OutboxPolicy: set OutboxCloseSlow (closed with 1008),
// OutboxDropOldest or OutboxDropNewest on the connections you publish to;
// under the default, OutboxReject, the message is dropped for that
// connection, as with OutboxDropNewest, and counted in Stats.Dropped. Messages reach each connection in
// the order they were published on this Hub (and in order with the
// connection's own WriteAsync calls, which share the outbox).
//
// Connections leave the Hub with [Hub.Remove]. To have them leave when they
// close, wrap the Event handler with [Hub.Wrap] (which also makes every
// open connection a receiver of [Hub.PublishAll]); without it, a closed
// connection is dropped the next time a message is published to it.
//
// With a [Broker] (Options.Broker), what is published on one Hub reaches
// the connections of the Hubs in other processes too, once each: a Hub
// delivers its own messages to its connections at once and ignores them
// when the broker brings them back. With an [InterestBroker] the Hub tells
// the Broker which topics have local subscribers, so that a process receives
// the messages of its own topics and PublishAll's only.
//
// With a [HistoryBroker] ([MemoryHistory] in one process) every message is
// numbered within its topic and kept, each connection gets it framed with
// its sequence (Options.Frame), and [Hub.SubscribeSince] gives a client that
// comes back what it missed.
//
// For chat: [Hub.PublishExcept] leaves the sender out, [Hub.AppendSubscribers]
// and [Hub.SubscriberCount] tell a topic's local members, and [Hub.Topics] a
// connection's topics.
//
// The zero value is a Hub local to the process, ready to use; [New] makes
// one with a Broker. A Hub is safe for concurrent use and must not be
// copied after first use.
type Hub struct {
	broker      Broker
	unsubscribe func()
	interest    Interest // set when broker is an InterestBroker; called with mu held
	logger      *slog.Logger
	id          [8]byte
	hist        *history // set when broker is a HistoryBroker

	closed atomic.Bool
	mu     sync.RWMutex
	topics map[string]*topicSet
	conns  map[*gust.Conn]*receiver
	ids    map[uint64]*gust.Conn // with a HistoryBroker: receivers by id, for PublishExcept
	nextID uint64
	done   func(error) // h.written, bound once: every queued message carries it
	lists  sync.Pool   // *[]*gust.Conn: deliver's copies of the receivers

	delivered  atomic.Uint64
	dropped    atomic.Uint64
	closedSlow atomic.Uint64
	pending    atomic.Int64
	recoveries atomic.Uint64
	gaps       atomic.Uint64
	resets     atomic.Uint64
}

// receiver is what the Hub knows of a connection it holds; guarded by
// Hub.mu.
type receiver struct {
	topics []string
	pinned bool   // joined through Wrap: stays without topics
	id     uint64 // with a HistoryBroker: names it in PublishExcept's envelope
}

// topicSet is a topic's local subscribers; guarded by Hub.mu.
type topicSet struct {
	conns map[*gust.Conn]member
	// last is, with a HistoryBroker, the sequence of the last message
	// delivered, of lastEpoch, set only by the Broker's handler goroutine:
	// a message whose Prev is past it tells of messages this process
	// missed.
	last      atomic.Uint64
	lastEpoch string
}

// member is a subscriber's state in a topic.
type member struct {
	// rp is its recovery under way (Hub.SubscribeSince), nil once it
	// receives the topic's messages as they come.
	rp *replay
	// floor is the last sequence its recovery sent: a message up to it
	// that comes afterwards (the Broker brought it late, or the Hub
	// repairs it) is not sent again.
	floor uint64
	// epoch is the history's epoch its recovery ended in: a message of
	// another (the history started over) is preceded by a NoticeGap with
	// Reset. Empty for a subscriber that did not recover.
	epoch string
}

// Stats are a Hub's counters, from its start.
type Stats struct {
	// Delivered counts messages written to a connection: handed to the
	// kernel, or corked behind the writes of the connection's read
	// goroutine, which flushes them before its next read.
	Delivered uint64
	// Dropped counts messages that were meant for a connection and never
	// written to it: refused or discarded by its outbox's policy
	// (ErrQueueFull), discarded with the outbox of a connection closed as
	// slow, or whose write failed.
	Dropped uint64
	// ClosedSlow counts connections whose outbox a message of this Hub
	// overflowed under gust.OutboxCloseSlow, and which were closed for it.
	ClosedSlow uint64
	// Pending is the number of this Hub's messages in connection outboxes
	// now, queued or being written. A publisher that would rather slow
	// down than drop can wait while it is high.
	Pending int64
	// Connections is the number of connections the Hub holds now.
	Connections int
	// Topics is the number of topics with at least one subscriber.
	Topics int
	// Recoveries counts SubscribeSince recoveries started.
	Recoveries uint64
	// Gaps counts the NoticeGap a connection was sent (some messages it
	// asked for no longer kept, or a reset); Resets, those of them with
	// Reset (its position of another epoch or past the history's end, or
	// the history started over under it).
	Gaps, Resets uint64
	// History is what the HistoryBroker keeps, when it reports it (as
	// MemoryHistory does); zero otherwise.
	History HistoryStats
}

// HistoryStats is what a history keeps: the topics with messages, the
// messages, and the bytes they count for (MemoryHistoryOptions.MaxBytes).
type HistoryStats struct {
	Topics, Records int
	Bytes           int64
}

// New returns a Hub; a nil opts means the defaults, and New(nil) is the
// same as a zero Hub. With a Broker, New subscribes to it, and returns the
// Broker's error if that fails.
func New(opts *Options) (*Hub, error) {
	h := new(Hub)
	if opts != nil {
		h.broker, h.logger = opts.Broker, opts.Logger
	}
	rand.Read(h.id[:])
	if hb, ok := h.broker.(HistoryBroker); ok {
		h.hist = newHistory(hb, opts.Frame)
		in, err := hb.SubscribeHistory(h.fromHistory)
		if err != nil {
			return nil, fmt.Errorf("gust: hub: subscribing to the broker: %w", err)
		}
		h.interest, h.unsubscribe = in, in.Unsubscribe
	} else if ib, ok := h.broker.(InterestBroker); ok {
		in, err := ib.SubscribeInterest(h.fromBroker)
		if err != nil {
			return nil, fmt.Errorf("gust: hub: subscribing to the broker: %w", err)
		}
		h.interest, h.unsubscribe = in, in.Unsubscribe
	} else if h.broker != nil {
		unsub, err := h.broker.Subscribe(h.fromBroker)
		if err != nil {
			return nil, fmt.Errorf("gust: hub: subscribing to the broker: %w", err)
		}
		h.unsubscribe = unsub
	}
	return h, nil
}

// Subscribe adds c to topic's receivers; the Hub holds c from then on.
// Subscribing twice to one topic is the same as once. It returns ErrClosed
// after Close. A connection that has already closed is held until a message
// is next published to it.
func (h *Hub) Subscribe(c *gust.Conn, topic string) error {
	_, err := h.subscribe(c, topic, nil)
	return err
}

// subscribe adds c to topic's receivers, recovering through rp if not nil,
// and reports whether c was not subscribed yet.
func (h *Hub) subscribe(c *gust.Conn, topic string, rp *replay) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, err := h.holdLocked(c)
	if err != nil {
		return false, err
	}
	if slices.Contains(r.topics, topic) {
		return false, nil
	}
	r.topics = append(r.topics, topic)
	set := h.topics[topic]
	if set == nil {
		set = &topicSet{conns: make(map[*gust.Conn]member)}
		h.topics[topic] = set
		if h.interest != nil {
			if err := h.interest.Add(topic); err != nil {
				h.log().Warn("gust: hub: the broker cannot route the topic to this Hub", "topic", topic, "err", err)
			}
		}
	}
	set.conns[c] = member{rp: rp}
	return true, nil
}

// holdLocked returns c's receiver, making it (and, in a zero Hub, the
// Hub's maps) if needed.
func (h *Hub) holdLocked(c *gust.Conn) (*receiver, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	if r := h.conns[c]; r != nil {
		return r, nil
	}
	if h.conns == nil {
		h.conns = make(map[*gust.Conn]*receiver)
		h.topics = make(map[string]*topicSet)
		h.done = h.written
	}
	r := &receiver{}
	h.conns[c] = r
	if h.hist != nil {
		if h.ids == nil {
			h.ids = make(map[uint64]*gust.Conn)
		}
		h.nextID++
		r.id = h.nextID
		h.ids[r.id] = c
	}
	return r, nil
}

// Unsubscribe removes c from topic's receivers. Messages already queued for
// c are still written. A connection left without a topic leaves the Hub,
// unless it joined through Wrap: those stay, for PublishAll, until they
// close.
func (h *Hub) Unsubscribe(c *gust.Conn, topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.conns[c]
	if r == nil {
		return
	}
	i := slices.Index(r.topics, topic)
	if i < 0 {
		return
	}
	r.topics = slices.Delete(r.topics, i, i+1)
	h.leaveTopicLocked(c, topic)
	if len(r.topics) == 0 && !r.pinned {
		h.dropLocked(c, r)
	}
}

// dropLocked lets go of c, whose receiver is r.
func (h *Hub) dropLocked(c *gust.Conn, r *receiver) {
	delete(h.conns, c)
	if r.id != 0 {
		delete(h.ids, r.id)
	}
}

func (h *Hub) leaveTopicLocked(c *gust.Conn, topic string) {
	if set := h.topics[topic]; set != nil {
		delete(set.conns, c)
		if len(set.conns) == 0 {
			delete(h.topics, topic)
			if h.interest != nil {
				h.interest.Remove(topic)
			}
		}
	}
}

// Remove takes c out of every topic and out of the Hub. Messages already
// in c's outbox are still written.
func (h *Hub) Remove(c *gust.Conn) {
	h.mu.Lock()
	if r := h.conns[c]; r != nil {
		for _, t := range r.topics {
			h.leaveTopicLocked(c, t)
		}
		h.dropLocked(c, r)
	}
	h.mu.Unlock()
}

// Wrap returns an Event that passes every call on to next and keeps the
// Hub up to date: OnOpen makes the connection a receiver of PublishAll
// before next.OnOpen runs, and OnClose removes it from the Hub before
// next.OnClose runs (so next.OnClose may publish to the connection's
// topics, for example a "left" notice, without sending it to the closed
// connection). Use it when making the Upgrader, Server or client:
//
//	srv := &gust.Server{Upgrader: gust.Upgrader{
//		Handler: h.Wrap(handler),
//		Options: gust.Options{OutboxPolicy: gust.OutboxCloseSlow},
//	}}
func (h *Hub) Wrap(next gust.Event) gust.Event {
	if next == nil {
		next = gust.BuiltinEventHandler{}
	}
	return hubEvents{hub: h, Event: next}
}

type hubEvents struct {
	hub *Hub
	gust.Event
}

func (e hubEvents) OnOpen(c *gust.Conn) {
	h := e.hub
	h.mu.Lock()
	if r, err := h.holdLocked(c); err == nil {
		r.pinned = true
	}
	h.mu.Unlock()
	e.Event.OnOpen(c)
}

func (e hubEvents) OnClose(c *gust.Conn, err error) {
	e.hub.Remove(c)
	e.Event.OnClose(c, err)
}

// Publish sends a message of type op (OpText or OpBinary) with payload p to
// every connection subscribed to topic, and through the Broker to those of
// the other processes' Hubs. It does not wait for any write: it frames the
// message once and queues it in each receiver's outbox. p may be reused
// when Publish returns. An error from the Broker is returned after the
// local receivers have their message.
//
// With a HistoryBroker, Publish returns once the Broker has numbered and
// stored the message, and every Hub, this one included, delivers it when
// the Broker brings it back, framed by Options.Frame with its sequence:
// the connections of every process get a topic's messages in one order.
// When the Broker fails, no connection gets the message.
func (h *Hub) Publish(topic string, op gust.Opcode, p []byte) error {
	return h.publish(topic, false, nil, op, p)
}

// PublishExcept is Publish to every subscriber of topic but except,
// typically the sender of a chat message, which need not get its own
// message back. except is a connection of this Hub (or nil, which makes it
// Publish): the Hubs of other processes deliver the message to all their
// subscribers of topic.
func (h *Hub) PublishExcept(topic string, op gust.Opcode, p []byte, except *gust.Conn) error {
	return h.publish(topic, false, except, op, p)
}

// PublishAll sends a message to every connection the Hub holds: those
// subscribed to any topic, and with Wrap every open connection; and
// through the Broker to every connection of the other Hubs.
func (h *Hub) PublishAll(op gust.Opcode, p []byte) error {
	return h.publish("", true, nil, op, p)
}

func (h *Hub) publish(topic string, all bool, except *gust.Conn, op gust.Opcode, p []byte) error {
	if h.closed.Load() {
		return ErrClosed
	}
	if h.hist != nil {
		return h.publishHistory(topic, all, except, op, p, "", nil)
	}
	pm, err := gust.NewPreparedMessage(op, p)
	if err != nil {
		return err
	}
	h.deliver(topic, all, except, pm, numbered{})
	if h.broker != nil {
		if err := h.broker.Publish(topic, h.envelope(all, op, p, 0)); err != nil {
			return fmt.Errorf("gust: hub: publishing to the broker: %w", err)
		}
	}
	return nil
}

// deliver queues pm in the outbox of each local receiver but except (nil
// excepts none), and counts what the outboxes refused. A connection that
// has closed, or that its outbox closed as slow, leaves the Hub. With a
// HistoryBroker, at is pm's place in the topic's history: a receiver still
// recovering the topic gets pm after its recovery, one whose recovery sent
// pm does not get it again, and one whose recovery ended in another epoch
// is told to start over first.
//
// The receivers are copied out first, and queued to without h.mu held: a
// full outbox may call the done function of a message it discards on this
// goroutine, and that function may well call the Hub.
func (h *Hub) deliver(topic string, all bool, except *gust.Conn, pm *gust.PreparedMessage, at numbered) {
	lp, _ := h.lists.Get().(*[]*gust.Conn)
	if lp == nil {
		lp = new([]*gust.Conn)
	}
	to := (*lp)[:0]
	var anew []*gust.Conn // receivers of another epoch
	h.mu.RLock()
	if all {
		for c := range h.conns {
			to = append(to, c)
		}
	} else if set := h.topics[topic]; set != nil {
		for c, m := range set.conns {
			switch {
			case c == except:
			case m.rp != nil:
				m.rp.later(at.epoch, at.seq, pm)
			case m.epoch != at.epoch && m.epoch != "":
				anew = append(anew, c)
			case at.seq != 0 && at.seq <= m.floor: // its recovery sent it
			default:
				to = append(to, c)
			}
		}
	}
	done := h.done
	h.mu.RUnlock()
	if anew != nil {
		to = h.startOver(topic, anew, at.epoch, to)
	}

	// Counted before queueing: a writer may be done with a message before
	// the loop is.
	h.pending.Add(int64(len(to)))
	var t tally
	for _, c := range to {
		t.add(c, c.WritePreparedAsync(pm, done))
	}
	clear(to)
	*lp = to[:0]
	h.lists.Put(lp)
	if t.refused > 0 {
		h.pending.Add(-t.refused)
		h.dropped.Add(t.dropped)
		h.closedSlow.Add(t.slow)
	}
	for _, c := range t.gone {
		h.Remove(c)
	}
}

// startOver tells the receivers cs of topic that its history started over
// in epoch, which is theirs from now on, and appends those still live
// receivers of the topic to to.
func (h *Hub) startOver(topic string, cs []*gust.Conn, epoch string, to []*gust.Conn) []*gust.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.topics[topic]
	if set == nil {
		return to
	}
	for _, c := range cs {
		if m, ok := set.conns[c]; ok && m.rp == nil && m.epoch != epoch {
			set.conns[c] = member{epoch: epoch}
			h.queueNotice(c, Notice{Kind: NoticeGap, Topic: topic, Epoch: epoch, Reset: true})
			to = append(to, c)
		}
	}
	return to
}

// tally counts the outcomes of one delivery.
type tally struct {
	refused       int64 // messages no outbox took
	dropped, slow uint64
	gone          []*gust.Conn // connections to remove
}

func (t *tally) add(c *gust.Conn, err error) {
	if err == nil {
		return
	}
	t.refused++
	switch {
	case errors.Is(err, gust.ErrQueueFull):
		t.dropped++
	case errors.Is(err, gust.ErrSlowConsumer):
		t.dropped++
		t.slow++
		t.gone = append(t.gone, c)
	default: // net.ErrClosed: the connection has closed, or is closing
		t.gone = append(t.gone, c)
	}
}

// written is the done function of every message the Hub queues.
func (h *Hub) written(err error) {
	if err == nil {
		h.delivered.Add(1)
	} else {
		h.dropped.Add(1)
	}
	h.pending.Add(-1)
}

// AppendSubscribers appends the connections subscribed to topic on this
// Hub (not those of other processes' Hubs) to dst, in no particular order,
// and returns the extended slice; pass a reused dst[:0] to list a topic's
// members without allocating. It is a snapshot: connections may subscribe,
// leave or close as soon as it returns, and without Wrap a closed
// connection is listed until a message is next published to it. Like every
// method, it may be called from any goroutine, event handlers included.
func (h *Hub) AppendSubscribers(dst []*gust.Conn, topic string) []*gust.Conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	set := h.topics[topic]
	if set == nil {
		return dst
	}
	dst = slices.Grow(dst, len(set.conns))
	for c := range set.conns {
		dst = append(dst, c)
	}
	return dst
}

// SubscriberCount returns the number of connections subscribed to topic on
// this Hub, as AppendSubscribers would list them now (a snapshot too); it
// does not allocate.
func (h *Hub) SubscriberCount(topic string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if set := h.topics[topic]; set != nil {
		return len(set.conns)
	}
	return 0
}

// Topics returns the topics c is subscribed to on this Hub, in the order it
// joined them; nil if it has none or the Hub does not hold it. The slice is
// a copy, the caller's to keep: a snapshot, which Subscribe and
// Unsubscribe calls made afterwards do not change.
func (h *Hub) Topics(c *gust.Conn) []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if r := h.conns[c]; r != nil && len(r.topics) > 0 {
		return slices.Clone(r.topics)
	}
	return nil
}

// Stats returns the Hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.RLock()
	conns, topics := len(h.conns), len(h.topics)
	h.mu.RUnlock()
	st := Stats{
		Delivered:   h.delivered.Load(),
		Dropped:     h.dropped.Load(),
		ClosedSlow:  h.closedSlow.Load(),
		Pending:     h.pending.Load(),
		Connections: conns,
		Topics:      topics,
		Recoveries:  h.recoveries.Load(),
		Gaps:        h.gaps.Load(),
		Resets:      h.resets.Load(),
	}
	if h.hist != nil {
		if hs, ok := h.hist.broker.(interface{ Stats() HistoryStats }); ok {
			st.History = hs.Stats()
		}
	}
	return st
}

// Close unsubscribes from the Broker and removes every connection from the
// Hub (it does not close them, and what their outboxes hold is still
// written). Publish and Subscribe then return ErrClosed.
func (h *Hub) Close() error {
	if h.closed.Swap(true) {
		return nil
	}
	if h.unsubscribe != nil {
		h.unsubscribe()
	}
	if h.hist != nil {
		h.hist.close() // ends the recoveries under way
	}
	h.mu.Lock()
	clear(h.conns)
	clear(h.topics)
	clear(h.ids)
	h.mu.Unlock()
	return nil
}

// The envelope a Hub hands its Broker: a version byte, flags, the opcode,
// the publishing Hub's id, with envelopeExcept the id of the receiver to
// leave out (8 bytes, big-endian: only a HistoryBroker brings a message
// back to the Hub that published it), then the payload.
const (
	envelopeVersion = 1
	envelopeAll     = 1 << 0
	envelopeExcept  = 1 << 1
	envelopeHeader  = 3 + 8
)

func (h *Hub) envelope(all bool, op gust.Opcode, p []byte, except uint64) []byte {
	n := envelopeHeader
	if except != 0 {
		n += 8
	}
	b := make([]byte, n+len(p))
	b[0] = envelopeVersion
	if all {
		b[1] = envelopeAll
	}
	b[2] = byte(op)
	copy(b[3:], h.id[:])
	if except != 0 {
		b[1] |= envelopeExcept
		binary.BigEndian.PutUint64(b[envelopeHeader:], except)
	}
	copy(b[n:], p)
	return b
}

// log returns Options.Logger, or slog.Default() when it is nil.
func (h *Hub) log() *slog.Logger {
	if h.logger != nil {
		return h.logger
	}
	return slog.Default()
}

// fromBroker delivers a message another Hub published.
func (h *Hub) fromBroker(topic string, msg []byte) {
	env, err := decodeEnvelope(msg)
	if err != nil {
		h.log().Warn("gust: hub: ignoring a broker message that is not a hub envelope", "topic", topic)
		return
	}
	if env.from == h.id || h.closed.Load() {
		return // our own, delivered when it was published
	}
	pm, err := gust.NewPreparedMessage(env.op, env.payload)
	if err != nil {
		h.log().Warn("gust: hub: ignoring a broker message", "topic", topic, "err", err)
		return
	}
	h.deliver(topic, env.all, nil, pm, numbered{})
}
