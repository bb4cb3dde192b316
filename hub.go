package gust

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// SlowPolicy is what a [Hub] does when a message is published to a
// receiver whose queue is full: a connection that reads more slowly than
// messages are published to it.
type SlowPolicy uint8

const (
	// CloseSlow, the default, discards the receiver's queue and closes the
	// connection with 1008 (policy violation): a close frame once the write
	// in progress (if any) completes, or a cut connection when that write
	// is still blocked after HubOptions.SlowCloseTimeout.
	CloseSlow SlowPolicy = iota
	// DropOldest discards the oldest queued message that is not being
	// written yet, to make room for the new one: the receiver sees the
	// latest messages, with gaps.
	DropOldest
	// DropNewest discards the message being published: the receiver sees
	// what was queued first, with gaps.
	DropNewest
)

func (p SlowPolicy) String() string {
	switch p {
	case CloseSlow:
		return "CloseSlow"
	case DropOldest:
		return "DropOldest"
	case DropNewest:
		return "DropNewest"
	}
	return fmt.Sprintf("SlowPolicy(%d)", uint8(p))
}

// HubOptions configures a [Hub]. The zero value is valid, and a nil
// *HubOptions means the zero value.
type HubOptions struct {
	// QueueSize bounds the messages waiting for one connection, besides the
	// batch its writer is writing (at most QueueSize more). Default 256.
	// Memory: a queue holds references to messages that every receiver
	// shares, so a Hub holds at most 2 × QueueSize × 8 bytes per
	// connection plus the messages still referenced; an idle connection's
	// queue is empty and small.
	QueueSize int

	// Policy is what happens when a connection's queue is full.
	// Default CloseSlow.
	Policy SlowPolicy

	// SlowCloseTimeout bounds the time CloseSlow waits for a blocked write
	// to the slow connection before it cuts the connection without a close
	// frame. Default 5s.
	SlowCloseTimeout time.Duration

	// Broker, when set, carries what is published to the Hubs of other
	// processes, and delivers what they publish to this Hub's connections.
	// Default nil: the Hub is local to the process.
	Broker Broker

	// ErrorLog receives messages from the Broker that the Hub cannot
	// decode. Default: the log package's standard logger.
	ErrorLog *log.Logger
}

const (
	defaultHubQueueSize     = 256
	defaultSlowCloseTimeout = 5 * time.Second
	// keptQueueCap is the capacity past which an emptied queue gives its
	// slice back rather than keep it for the next message.
	keptQueueCap = 16
)

// ErrHubClosed is returned by a Hub's methods after Close.
var ErrHubClosed = errors.New("gust: hub closed")

// Hub sends messages to the connections subscribed to a topic, or to every
// connection it holds, without ever blocking the publisher on a slow
// socket.
//
// Each message is framed once (a [PreparedMessage]) and put on a bounded
// queue per receiving connection; a writer goroutine per connection writes
// what is queued, all of a batch in one system call, and exits when the
// queue is empty, so an idle subscriber costs no goroutine. A connection
// whose queue is full is handled by [HubOptions.Policy]: closed with 1008
// (the default), or its oldest or newest message dropped. Messages reach
// each connection in the order they were published on this Hub.
//
// Connections leave the Hub with [Hub.Remove]. To have them leave when they
// close, wrap the Event handler with [Hub.Wrap] (which also makes every
// open connection a receiver of [Hub.PublishAll]); without it, a closed
// connection is dropped the next time a message is published to it.
//
// With a [Broker] (HubOptions.Broker), what is published on one Hub reaches
// the connections of the Hubs in other processes too, once each: a Hub
// delivers its own messages to its connections at once and ignores them
// when the broker brings them back.
//
// A Hub is safe for concurrent use.
type Hub struct {
	id          [8]byte
	queueSize   int
	policy      SlowPolicy
	slowTimeout time.Duration
	broker      Broker
	unsubscribe func()
	errorLog    *log.Logger

	closed atomic.Bool
	mu     sync.RWMutex
	topics map[string]map[*receiver]struct{}
	conns  map[*Conn]*receiver

	delivered  atomic.Uint64
	dropped    atomic.Uint64
	closedSlow atomic.Uint64
	pending    atomic.Int64
}

// HubStats are a Hub's counters, from its start.
type HubStats struct {
	// Delivered counts messages written to a connection (handed to the
	// kernel, or corked on a connection whose read goroutine flushes them).
	Delivered uint64
	// Dropped counts messages that were meant for a connection and never
	// written to it: dropped by DropOldest or DropNewest, discarded with
	// the queue of a connection that was closed as slow, removed, or whose
	// write failed.
	Dropped uint64
	// ClosedSlow counts connections closed by the CloseSlow policy.
	ClosedSlow uint64
	// Pending is the number of messages queued now, over every connection.
	// A publisher that would rather slow down than drop can wait while it
	// is high.
	Pending int64
	// Connections is the number of connections the Hub holds now.
	Connections int
	// Topics is the number of topics with at least one subscriber.
	Topics int
}

// NewHub returns a Hub. A nil opts means the defaults. With a Broker, it
// subscribes to it, and returns the Broker's error if that fails.
func NewHub(opts *HubOptions) (*Hub, error) {
	var o HubOptions
	if opts != nil {
		o = *opts
	}
	if o.QueueSize <= 0 {
		o.QueueSize = defaultHubQueueSize
	}
	if o.SlowCloseTimeout <= 0 {
		o.SlowCloseTimeout = defaultSlowCloseTimeout
	}
	if o.ErrorLog == nil {
		o.ErrorLog = log.Default()
	}
	if o.Policy > DropNewest {
		return nil, fmt.Errorf("gust: unknown hub policy %v", o.Policy)
	}
	h := &Hub{
		queueSize:   o.QueueSize,
		policy:      o.Policy,
		slowTimeout: o.SlowCloseTimeout,
		broker:      o.Broker,
		errorLog:    o.ErrorLog,
		topics:      make(map[string]map[*receiver]struct{}),
		conns:       make(map[*Conn]*receiver),
	}
	rand.Read(h.id[:])
	if h.broker != nil {
		unsub, err := h.broker.Subscribe(h.fromBroker)
		if err != nil {
			return nil, fmt.Errorf("gust: hub: subscribing to the broker: %w", err)
		}
		h.unsubscribe = unsub
	}
	return h, nil
}

// Subscribe adds c to topic's receivers; the Hub holds c from then on.
// Subscribing twice to one topic is the same as once. It returns
// net.ErrClosed when c has closed, and ErrHubClosed after Close.
func (h *Hub) Subscribe(c *Conn, topic string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, err := h.holdLocked(c)
	if err != nil {
		return err
	}
	if slices.Contains(r.topics, topic) {
		return nil
	}
	r.topics = append(r.topics, topic)
	set := h.topics[topic]
	if set == nil {
		set = make(map[*receiver]struct{})
		h.topics[topic] = set
	}
	set[r] = struct{}{}
	return nil
}

// holdLocked returns c's receiver, making it if needed.
func (h *Hub) holdLocked(c *Conn) (*receiver, error) {
	if h.closed.Load() {
		return nil, ErrHubClosed
	}
	if r := h.conns[c]; r != nil {
		return r, nil
	}
	if c.netDone.Load() {
		return nil, errClosed
	}
	r := &receiver{hub: h, c: c}
	h.conns[c] = r
	return r, nil
}

// Unsubscribe removes c from topic's receivers. Messages already queued for
// c may still be written. A connection left without a topic leaves the Hub,
// unless it joined through Wrap: those stay, for PublishAll, until they
// close.
func (h *Hub) Unsubscribe(c *Conn, topic string) {
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
	h.leaveTopicLocked(r, topic)
	if len(r.topics) == 0 && !r.pinned {
		h.removeLocked(r)
	}
}

func (h *Hub) leaveTopicLocked(r *receiver, topic string) {
	if set := h.topics[topic]; set != nil {
		delete(set, r)
		if len(set) == 0 {
			delete(h.topics, topic)
		}
	}
}

// Remove takes c out of every topic and out of the Hub, and discards what
// is queued for it (a write in progress completes).
func (h *Hub) Remove(c *Conn) {
	h.mu.Lock()
	if r := h.conns[c]; r != nil {
		h.removeLocked(r)
	}
	h.mu.Unlock()
}

func (h *Hub) removeLocked(r *receiver) {
	for _, t := range r.topics {
		h.leaveTopicLocked(r, t)
	}
	r.topics = nil
	if h.conns[r.c] == r {
		delete(h.conns, r.c)
	}
	r.mu.Lock()
	if r.state == receiverActive {
		r.state = receiverRemoved
		r.discardLocked()
	}
	r.mu.Unlock()
}

// remove is removeLocked for a goroutine that does not hold h.mu.
func (h *Hub) remove(r *receiver) {
	h.mu.Lock()
	h.removeLocked(r)
	h.mu.Unlock()
}

// Wrap returns an Event that passes every call on to next and keeps the
// Hub up to date: OnOpen makes the connection a receiver of PublishAll
// before next.OnOpen runs, and OnClose removes it from the Hub before
// next.OnClose runs (so next.OnClose may publish to the connection's
// topics, for example a "left" notice, without sending it to the closed
// connection). Use it when making the Upgrader, Server or client:
//
//	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: hub.Wrap(handler)}}
func (h *Hub) Wrap(next Event) Event {
	if next == nil {
		next = BuiltinEventHandler{}
	}
	return hubEvents{hub: h, Event: next}
}

type hubEvents struct {
	hub *Hub
	Event
}

func (e hubEvents) OnOpen(c *Conn) {
	h := e.hub
	h.mu.Lock()
	if r, err := h.holdLocked(c); err == nil {
		r.pinned = true
	}
	h.mu.Unlock()
	e.Event.OnOpen(c)
}

func (e hubEvents) OnClose(c *Conn, err error) {
	e.hub.Remove(c)
	e.Event.OnClose(c, err)
}

// Publish sends a message of type op (OpText or OpBinary) with payload p to
// every connection subscribed to topic, and through the Broker to those of
// the other processes' Hubs. It does not wait for any write: it frames the
// message once and queues it for each receiver. p may be reused when
// Publish returns. An error from the Broker is returned after the local
// receivers have their message.
func (h *Hub) Publish(topic string, op Opcode, p []byte) error {
	return h.publish(topic, false, op, p)
}

// PublishAll sends a message to every connection the Hub holds: those
// subscribed to any topic, and with Wrap every open connection; and
// through the Broker to every connection of the other Hubs.
func (h *Hub) PublishAll(op Opcode, p []byte) error {
	return h.publish("", true, op, p)
}

func (h *Hub) publish(topic string, all bool, op Opcode, p []byte) error {
	if h.closed.Load() {
		return ErrHubClosed
	}
	pm, err := NewPreparedMessage(op, p)
	if err != nil {
		return err
	}
	h.deliver(topic, all, pm)
	if h.broker != nil {
		if err := h.broker.Publish(topic, h.envelope(all, op, p)); err != nil {
			return fmt.Errorf("gust: hub: publishing to the broker: %w", err)
		}
	}
	return nil
}

// deliver queues pm for the local receivers.
func (h *Hub) deliver(topic string, all bool, pm *PreparedMessage) {
	var stale []*receiver
	h.mu.RLock()
	if all {
		for _, r := range h.conns {
			if !r.enqueue(pm) {
				stale = append(stale, r)
			}
		}
	} else {
		for r := range h.topics[topic] {
			if !r.enqueue(pm) {
				stale = append(stale, r)
			}
		}
	}
	h.mu.RUnlock()
	for _, r := range stale {
		h.remove(r)
	}
}

// Stats returns the Hub's counters.
func (h *Hub) Stats() HubStats {
	h.mu.RLock()
	conns, topics := len(h.conns), len(h.topics)
	h.mu.RUnlock()
	return HubStats{
		Delivered:   h.delivered.Load(),
		Dropped:     h.dropped.Load(),
		ClosedSlow:  h.closedSlow.Load(),
		Pending:     h.pending.Load(),
		Connections: conns,
		Topics:      topics,
	}
}

// Close unsubscribes from the Broker and removes every connection from the
// Hub (it does not close them). Publish and Subscribe then return
// ErrHubClosed.
func (h *Hub) Close() error {
	if h.closed.Swap(true) {
		return nil
	}
	if h.unsubscribe != nil {
		h.unsubscribe()
	}
	h.mu.Lock()
	for _, r := range h.conns {
		h.removeLocked(r)
	}
	h.mu.Unlock()
	return nil
}

// The envelope a Hub hands its Broker: a version byte, flags, the opcode,
// the publishing Hub's id, then the payload.
const (
	envelopeVersion = 1
	envelopeAll     = 1 << 0
	envelopeHeader  = 3 + 8
)

func (h *Hub) envelope(all bool, op Opcode, p []byte) []byte {
	b := make([]byte, envelopeHeader+len(p))
	b[0] = envelopeVersion
	if all {
		b[1] = envelopeAll
	}
	b[2] = byte(op)
	copy(b[3:], h.id[:])
	copy(b[envelopeHeader:], p)
	return b
}

// fromBroker delivers a message another Hub published.
func (h *Hub) fromBroker(topic string, msg []byte) {
	if len(msg) < envelopeHeader || msg[0] != envelopeVersion {
		h.errorLog.Printf("gust: hub: ignoring a broker message on %q that is not a hub envelope", topic)
		return
	}
	if [8]byte(msg[3:11]) == h.id || h.closed.Load() {
		return // our own, delivered when it was published
	}
	pm, err := NewPreparedMessage(Opcode(msg[2]), msg[envelopeHeader:])
	if err != nil {
		h.errorLog.Printf("gust: hub: ignoring a broker message on %q: %v", topic, err)
		return
	}
	h.deliver(topic, msg[1]&envelopeAll != 0, pm)
}

// receiver is a connection the Hub holds: its topics (guarded by hub.mu)
// and its queue (guarded by mu).
type receiver struct {
	hub    *Hub
	c      *Conn
	topics []string
	pinned bool // joined through Wrap: stays without topics

	mu    sync.Mutex
	queue []*PreparedMessage // waiting to be written, oldest first
	spare []*PreparedMessage // the writer's batch slice, kept between batches
	busy  bool               // a writer goroutine runs
	state uint8
}

const (
	receiverActive  = iota
	receiverClosing // closed as slow: the writer sends the close frame
	receiverRemoved
)

// enqueue queues pm, applying the policy when the queue is full. It returns
// false when the connection has closed and the receiver should be removed.
func (r *receiver) enqueue(pm *PreparedMessage) bool {
	h := r.hub
	r.mu.Lock()
	if r.state != receiverActive {
		r.mu.Unlock()
		return true
	}
	if r.c.netDone.Load() {
		r.mu.Unlock()
		return false
	}
	if len(r.queue) >= h.queueSize {
		switch h.policy {
		case DropNewest:
			r.mu.Unlock()
			h.dropped.Add(1)
			return true
		case DropOldest:
			copy(r.queue, r.queue[1:])
			r.queue[len(r.queue)-1] = nil
			r.queue = r.queue[:len(r.queue)-1]
			h.dropped.Add(1)
			h.pending.Add(-1)
		default:
			r.closeSlowLocked()
			r.mu.Unlock()
			return true
		}
	}
	r.queue = append(r.queue, pm)
	h.pending.Add(1)
	r.startLocked()
	r.mu.Unlock()
	return true
}

// startLocked starts the writer unless it runs.
func (r *receiver) startLocked() {
	if !r.busy {
		r.busy = true
		go r.drain()
	}
}

// discardLocked drops what is queued (not what is being written).
func (r *receiver) discardLocked() {
	if n := len(r.queue); n > 0 {
		r.hub.dropped.Add(uint64(n))
		r.hub.pending.Add(int64(-n))
		clear(r.queue)
		r.queue = r.queue[:0]
	}
	if cap(r.queue) > keptQueueCap {
		r.queue = nil
	}
}

// closeSlowLocked applies CloseSlow: the queue goes, a write blocked on the
// socket gets a deadline, and the writer sends the close frame.
func (r *receiver) closeSlowLocked() {
	h := r.hub
	r.state = receiverClosing
	r.discardLocked()
	h.dropped.Add(1) // the message being published
	h.closedSlow.Add(1)
	c := r.c
	c.errMu.Lock()
	if c.err == nil {
		c.err = errSlowConsumer
	}
	c.errMu.Unlock()
	c.setWriteDeadline(time.Now().Add(h.slowTimeout))
	r.startLocked()
}

// errSlowConsumer is what OnClose receives for a connection CloseSlow
// closed, unless the peer answered the close frame.
var errSlowConsumer = &ProtocolError{Code: StatusPolicyViolation, Reason: "slow consumer: hub queue full"}

// drain is the writer goroutine: it writes the queue in batches and exits
// when it is empty.
func (r *receiver) drain() {
	h := r.hub
	for {
		r.mu.Lock()
		switch {
		case r.state == receiverClosing:
			r.mu.Unlock()
			r.c.startClose(StatusPolicyViolation, "slow consumer")
			h.remove(r)
			r.mu.Lock()
			r.state = receiverRemoved
			r.queue, r.spare, r.busy = nil, nil, false
			r.mu.Unlock()
			return
		case r.state == receiverRemoved || len(r.queue) == 0:
			r.busy = false
			if cap(r.spare) > keptQueueCap || r.state == receiverRemoved {
				r.spare = nil
			}
			if cap(r.queue) > keptQueueCap {
				r.queue = nil
			}
			r.mu.Unlock()
			return
		}
		batch := r.queue
		r.queue, r.spare = r.spare[:0], nil
		r.mu.Unlock()

		n, err := r.c.writePreparedBatch(batch)
		h.delivered.Add(uint64(n))
		if n < len(batch) {
			h.dropped.Add(uint64(len(batch) - n))
		}
		h.pending.Add(int64(-len(batch)))
		clear(batch)

		r.mu.Lock()
		r.spare = batch[:0]
		r.mu.Unlock()
		if err != nil {
			// The connection has failed or is closing: it leaves the Hub.
			// A receiver closing as slow still sends its close frame.
			h.mu.Lock()
			r.mu.Lock()
			closing := r.state == receiverClosing
			r.mu.Unlock()
			if !closing {
				h.removeLocked(r)
			}
			h.mu.Unlock()
		}
	}
}

// writePreparedBatch writes prepared messages under one lock, all in one
// system call when they fit the write buffer. It returns how many were
// written without an error.
func (c *Conn) writePreparedBatch(batch []*PreparedMessage) (int, error) {
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	if len(batch) == 1 {
		// One message (the usual case when publishing is slower than the
		// socket): its prepared frame goes out as it is, without a copy
		// into the write buffer.
		if err := c.writePreparedLocked(batch[0]); err != nil {
			return 0, err
		}
		return 1, nil
	}
	var err error
	n := 0
	ferr := c.batchLocked(func() {
		for _, pm := range batch {
			if err = c.writePreparedLocked(pm); err != nil {
				return
			}
			n++
		}
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		n = 0 // how much of the corked bytes went out is unknown
	}
	return n, err
}

// writePreparedLocked is WritePrepared with c.wr.mu held.
func (c *Conn) writePreparedLocked(pm *PreparedMessage) error {
	if !c.server {
		return c.writeDataLocked(pm.op, pm.payload, true)
	}
	if err := c.writableLocked(); err != nil {
		return err
	}
	d := c.deflate
	if d == nil || len(pm.payload) < d.threshold {
		return c.writeRawLocked(pm.plain)
	}
	f, err := pm.frameFor(d)
	if err != nil {
		return err
	}
	if d.fw != nil {
		// The peer's window now holds this message, which the connection's
		// own compressor has not seen: its back-references would be off.
		// The next message starts from an empty window instead.
		d.putWriter(d.fw)
		d.fw = nil
	}
	return c.writeRawLocked(f)
}
