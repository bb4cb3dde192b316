package hub

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust"
)

// ErrNoHistory is returned by SubscribeSince on a Hub whose Broker is not a
// HistoryBroker.
var ErrNoHistory = errors.New("gust: hub: the broker keeps no history")

// Position is a place in a topic's history: the history's epoch and a
// sequence in it. A client keeps the Position of the last message it got
// (the epoch from the last NoticeRecovered or NoticeGap, the sequence from
// the last message) and passes it back to [Hub.SubscribeSince] when it
// comes back; the zero Position asks for all that is kept.
type Position struct {
	Epoch string
	Seq   uint64
}

// String returns p as "EPOCH:SEQ", the text form ParsePosition reads (a
// query parameter, say).
func (p Position) String() string {
	return p.Epoch + ":" + strconv.FormatUint(p.Seq, 10)
}

// ParsePosition reads a Position in the form String writes; "" and "0" are
// the zero Position, and a sequence without an epoch has an empty one
// (which no history has: such a client starts over).
func ParsePosition(s string) (Position, error) {
	epoch, seq := "", s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		epoch, seq = s[:i], s[i+1:]
	}
	if seq == "" && epoch == "" {
		return Position{}, nil
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || len(epoch) > maxEpoch {
		return Position{}, fmt.Errorf("gust: hub: not a history position: %.80q", s)
	}
	return Position{Epoch: epoch, Seq: n}, nil
}

// maxEpoch bounds the epoch ParsePosition accepts: gust's histories name
// theirs in a few bytes.
const maxEpoch = 64

// NoticeKind tells what a Notice says.
type NoticeKind uint8

const (
	// NoticeMessage is a published message: Seq is its topic sequence,
	// Op and Data the message.
	NoticeMessage NoticeKind = iota
	// NoticeGap says that messages published to the topic after Seq may
	// never reach the connection: the history no longer holds them. What
	// the history still holds follows. With Reset, what the client kept of
	// the topic is not of this history (its epoch changed, or the position
	// it passed is past the history's end): it drops it, and all the
	// history holds follows.
	NoticeGap
	// NoticeRecovered ends a recovery (Hub.SubscribeSince): the messages
	// missed since the sequence asked for have all been sent, Seq is the
	// last of them (or the one asked for when none was missed), and those
	// that follow come as they are published.
	NoticeRecovered
)

// A Notice is what a Hub with a HistoryBroker sends a connection, as the
// WebSocket message Options.Frame makes of it.
type Notice struct {
	Kind  NoticeKind
	Topic string
	Seq   uint64
	Epoch string      // NoticeGap and NoticeRecovered: the history's epoch
	Reset bool        // NoticeGap: drop what was kept of the topic
	Op    gust.Opcode // NoticeMessage: the message's opcode
	Data  []byte      // NoticeMessage: the payload as published
}

// FrameJSON is the default Options.Frame: a JSON object in a text message,
//
//	{"topic":"room-1","seq":42,"data":{"text":"hi"}}          a message
//	{"topic":"room-1","gap":40,"epoch":"k3x9"}                messages after 40 may be lost
//	{"topic":"room-1","gap":0,"epoch":"k3x9","reset":true}    drop what you kept: all kept follows
//	{"topic":"room-1","recovered":42,"epoch":"k3x9"}          caught up: what follows is live
//
// data holds a text payload as it is when it is JSON, as a JSON string when
// it is other text, and a binary payload as a base64 string.
func FrameJSON(dst []byte, n Notice) ([]byte, gust.Opcode) {
	dst = append(dst, `{"topic":`...)
	dst = appendJSONString(dst, n.Topic)
	switch n.Kind {
	case NoticeMessage:
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, n.Seq, 10)
		dst = append(dst, `,"data":`...)
		switch {
		case n.Op == gust.OpText && json.Valid(n.Data):
			dst = append(dst, n.Data...)
		case n.Op == gust.OpText:
			dst = appendJSONString(dst, string(n.Data))
		default:
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, n.Data)
			dst = append(dst, '"')
		}
	case NoticeGap:
		dst = append(dst, `,"gap":`...)
		dst = strconv.AppendUint(dst, n.Seq, 10)
		dst = append(dst, `,"epoch":`...)
		dst = appendJSONString(dst, n.Epoch)
		if n.Reset {
			dst = append(dst, `,"reset":true`...)
		}
	case NoticeRecovered:
		dst = append(dst, `,"recovered":`...)
		dst = strconv.AppendUint(dst, n.Seq, 10)
		dst = append(dst, `,"epoch":`...)
		dst = appendJSONString(dst, n.Epoch)
	}
	return append(dst, '}'), gust.OpText
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// Bounds of a recovery: how long it may take before the rest counts as a
// gap, how many live messages it keeps for its connection meanwhile, and
// how many of its messages may wait in the connection's outbox at a time.
const (
	recoveryTimeout = 30 * time.Second
	recoveryBacklog = 4096
	recoveryWindow  = 64
)

// history is what a Hub with a HistoryBroker keeps besides its maps: the
// Broker, the framing, and the recoveries under way.
type history struct {
	broker HistoryBroker
	frame  func(dst []byte, n Notice) ([]byte, gust.Opcode)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	frames map[string]*topicFrames // the records framed for the recoveries under way, by topic
}

// topicFrames are a topic's records as framed for its recoveries, each
// framed once however many connections recover it, and kept while any
// does and for framesLinger after the last: a crowd that joins over a few
// hundred milliseconds (a room everyone reopens, a reconnect storm) has
// its recoveries one after another as often as at once.
type topicFrames struct {
	users int
	pms   map[recordKey]*gust.PreparedMessage
	idle  *time.Timer // armed once users is 0: forgets them
}

// framesLinger is how long a topic's framed records outlive its last
// recovery.
const framesLinger = time.Second

type recordKey struct {
	epoch string
	seq   uint64
}

func newHistory(b HistoryBroker, frame func([]byte, Notice) ([]byte, gust.Opcode)) *history {
	if frame == nil {
		frame = FrameJSON
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &history{broker: b, frame: frame, ctx: ctx, cancel: cancel, frames: make(map[string]*topicFrames)}
}

func (hs *history) close() {
	hs.cancel()
	hs.wg.Wait()
	hs.mu.Lock()
	for topic, tf := range hs.frames {
		if tf.idle != nil {
			tf.idle.Stop()
		}
		delete(hs.frames, topic)
	}
	hs.mu.Unlock()
}

// prepare frames n as one message for every receiver.
func (hs *history) prepare(n Notice) (*gust.PreparedMessage, error) {
	p, op := hs.frame(nil, n)
	return gust.NewPreparedMessage(op, p)
}

// acquire and release bracket a recovery of topic: the frames of its
// records are shared while one is under way.
func (hs *history) acquire(topic string) {
	hs.mu.Lock()
	tf := hs.frames[topic]
	if tf == nil {
		tf = &topicFrames{pms: make(map[recordKey]*gust.PreparedMessage)}
		hs.frames[topic] = tf
	}
	if tf.users++; tf.idle != nil {
		tf.idle.Stop() // a forget that fires anyway finds users > 0
	}
	hs.mu.Unlock()
}

func (hs *history) release(topic string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	tf := hs.frames[topic]
	if tf == nil {
		return
	}
	if tf.users--; tf.users > 0 {
		return
	}
	forget := func() {
		hs.mu.Lock()
		if hs.frames[topic] == tf && tf.users == 0 {
			delete(hs.frames, topic)
		}
		hs.mu.Unlock()
	}
	if tf.idle == nil {
		tf.idle = time.AfterFunc(framesLinger, forget)
	} else {
		tf.idle.Reset(framesLinger)
	}
}

// record returns the frame of r, a record of a topic being recovered
// (between acquire and release), framing it if no recovery has yet.
func (hs *history) record(r Record, env envelope) (*gust.PreparedMessage, error) {
	key := recordKey{r.Epoch, r.Seq}
	hs.mu.Lock() // held while framing: a record is framed once (a few µs)
	defer hs.mu.Unlock()
	tf := hs.frames[r.Topic]
	if pm := tf.pms[key]; pm != nil {
		return pm, nil
	}
	pm, err := hs.prepare(Notice{Kind: NoticeMessage, Topic: r.Topic, Seq: r.Seq, Op: env.op, Data: env.payload})
	if err == nil {
		tf.pms[key] = pm
	}
	return pm, err
}

// replay is a connection's recovery of a topic: the live messages that
// arrive while the history is read wait here.
type replay struct {
	mu       sync.Mutex
	backlog  []numbered
	overflow bool // past recoveryBacklog: the rest is a gap
}

type numbered struct {
	epoch string
	seq   uint64
	pm    *gust.PreparedMessage
}

// later keeps a live message for after the recovery.
func (rp *replay) later(epoch string, seq uint64, pm *gust.PreparedMessage) {
	rp.mu.Lock()
	if len(rp.backlog) < recoveryBacklog {
		rp.backlog = append(rp.backlog, numbered{epoch, seq, pm})
	} else {
		rp.overflow = true
	}
	rp.mu.Unlock()
}

// SubscribeSince subscribes c to topic, as Subscribe does, and first sends
// c what the Broker's history holds of topic after since — all it holds
// for the zero Position — then the messages published from then on: every
// message once, in order, each framed with its sequence (Options.Frame). A
// client that reconnects, to this process or any other of the cluster,
// passes the Position of the last message it received and so misses
// nothing that the history still holds. The client's rule: keep the epoch
// of the last NoticeRecovered or NoticeGap and the sequence of the last
// message, and on a NoticeGap with Reset drop what it kept of the topic.
//
// What c is told first, by what since is:
//   - the zero Position: nothing; all the history holds follows;
//   - a position of the history's epoch that it still holds: nothing; the
//     messages after it follow;
//   - one of its epoch whose next messages it no longer holds: a NoticeGap
//     (Seq: since's), then what it holds;
//   - one of another epoch (the history started over: a MemoryHistory made
//     anew, a stream re-created), or past the history's last message (a
//     position the client made up, or kept from a history since lost): a
//     NoticeGap with Reset, then all the history holds — never silence.
//
// A NoticeRecovered with the epoch ends the recovery. If the history
// starts over later, c gets a NoticeGap with Reset and the new epoch before
// the first message numbered anew.
//
// SubscribeSince returns at once: a goroutine reads the history and queues
// it in c's outbox, at most 64 messages at a time, more as c reads them, so
// that a connection that does not read holds little and is cut by its
// outbox's policy or WriteTimeout like any slow receiver; each record is
// framed once for all the connections recovering it. A recovery takes at
// most 30 s, after which what it did not send counts as a gap; live
// messages that arrive meanwhile wait for it, up to 4,096, past which they
// count as a gap too. Close ends the recoveries under way. If c is
// subscribed to topic already, SubscribeSince does nothing. It returns
// ErrNoHistory without a HistoryBroker, ErrClosed after Close.
func (h *Hub) SubscribeSince(c *gust.Conn, topic string, since Position) error {
	if h.hist == nil {
		return ErrNoHistory
	}
	rp := new(replay)
	added, err := h.subscribe(c, topic, rp)
	if err != nil || !added {
		return err
	}
	h.recoveries.Add(1)
	h.hist.wg.Add(1)
	go h.recover(c, topic, since, rp)
	return nil
}

// errEpochChanged stops a recovery's read when the history starts over
// under it: the live messages of the new epoch, which wait in its backlog,
// tell the connection.
var errEpochChanged = errors.New("the history started over")

// recover sends c what topic's history holds after since, then what came
// live meanwhile, and makes c a live receiver of topic.
func (h *Hub) recover(c *gust.Conn, topic string, since Position, rp *replay) {
	defer h.hist.wg.Done()
	ctx, cancel := context.WithTimeout(h.hist.ctx, recoveryTimeout)
	defer cancel()
	h.hist.acquire(topic)
	defer h.hist.release(topic)
	fd := &feed{h: h, c: c, ctx: ctx, wake: make(chan struct{}, 1)}
	epoch := h.hist.broker.Epoch()
	reset := since.Seq > 0 && since.Epoch != epoch
	from := since.Seq
	if reset {
		from = 0
	}
	last, err := h.replayFrom(fd, topic, epoch, from, reset)
	if err == nil && from > 0 && last == 0 {
		// Nothing from since on, not even since: past the history's end
		// (or the history started over meanwhile: the epoch says).
		reset, epoch = true, h.hist.broker.Epoch()
		last, err = h.replayFrom(fd, topic, epoch, 0, true)
	}
	if fd.err != nil {
		h.Remove(c) // the connection failed: nothing more to send it
		return
	}
	gap := err != nil && !errors.Is(err, errEpochChanged)
	if gap && h.hist.ctx.Err() == nil { // not the Hub closing
		h.log().Warn("gust: hub: recovering a topic from the broker's history", "topic", topic, "since", since.String(), "err", err)
	}
	if last == 0 && !reset {
		last = from
	}
	h.goLive(c, topic, rp, epoch, last, gap)
}

// replayFrom queues for fd's connection the records of topic from
// sequence from on, of epoch, told first that they start over when reset,
// or that some are missing when the first is not from itself. It returns
// the last sequence queued (0 when none was).
func (h *Hub) replayFrom(fd *feed, topic, epoch string, from uint64, reset bool) (last uint64, err error) {
	first := true
	if reset {
		if err := fd.notice(Notice{Kind: NoticeGap, Topic: topic, Epoch: epoch, Reset: true}); err != nil {
			return 0, err
		}
	}
	err = h.hist.broker.History(fd.ctx, topic, from, func(r Record) error {
		if r.Epoch != epoch {
			return errEpochChanged
		}
		if first {
			first = false
			if from > 0 && r.Seq != from {
				if err := fd.notice(Notice{Kind: NoticeGap, Topic: topic, Seq: from, Epoch: epoch}); err != nil {
					return err
				}
			}
		}
		if r.Seq < from || from > 0 && r.Seq == from {
			last = r.Seq // since itself: the client has it
			return nil
		}
		env, err := decodeEnvelope(r.Msg)
		if err != nil {
			h.log().Warn("gust: hub: skipping a history record", "topic", topic, "seq", r.Seq, "err", err)
			return nil
		}
		pm, err := h.hist.record(r, env)
		if err == nil {
			if err := fd.send(pm); err != nil {
				return err
			}
		}
		last = r.Seq
		return nil
	})
	if fd.err != nil {
		return last, fd.err
	}
	return last, err
}

// feed queues a recovery's messages in its connection's outbox, at most
// recoveryWindow at a time: it waits for the connection to write some
// before it queues more.
type feed struct {
	h        *Hub
	c        *gust.Conn
	ctx      context.Context
	inflight atomic.Int32
	wake     chan struct{} // a message was written, or failed
	err      error         // the connection's: nothing more can be sent
}

func (fd *feed) notice(n Notice) error {
	fd.h.countNotice(n)
	pm, err := fd.h.hist.prepare(n)
	if err != nil {
		return nil // a Frame that makes an invalid message: nothing sent
	}
	return fd.send(pm)
}

// send queues pm, once fewer than recoveryWindow of fd's messages wait.
func (fd *feed) send(pm *gust.PreparedMessage) error {
	for {
		for fd.inflight.Load() >= recoveryWindow {
			if err := fd.wait(); err != nil {
				return err
			}
		}
		fd.inflight.Add(1)
		fd.h.pending.Add(1)
		err := fd.c.WritePreparedAsync(pm, fd.done)
		if err == nil {
			return nil
		}
		fd.inflight.Add(-1)
		fd.h.pending.Add(-1)
		if !errors.Is(err, gust.ErrQueueFull) || fd.inflight.Load() == 0 {
			// Closed, closed as slow, or full of the application's own
			// messages: the recovery cannot go on.
			fd.h.dropped.Add(1)
			fd.err = err
			return err
		}
		if err := fd.wait(); err != nil { // full: the application's writes share it
			return err
		}
	}
}

func (fd *feed) wait() error {
	select {
	case <-fd.wake:
		return nil
	case <-fd.ctx.Done():
		return fd.ctx.Err()
	}
}

// done is the done function of a recovery's messages: called by the
// connection's writer, it must not block.
func (fd *feed) done(err error) {
	fd.h.written(err)
	fd.inflight.Add(-1)
	select {
	case fd.wake <- struct{}{}:
	default:
	}
}

// goLive sends c, after its recovery, the live messages that waited, and
// makes it a live receiver of topic — under h.mu, so that no live message
// comes between.
func (h *Hub) goLive(c *gust.Conn, topic string, rp *replay, epoch string, last uint64, gap bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.topics[topic]
	if set == nil || set.conns[c].rp != rp {
		return // unsubscribed, removed or closed meanwhile
	}
	rp.mu.Lock()
	backlog, overflow := rp.backlog, rp.overflow
	rp.backlog = nil
	rp.mu.Unlock()
	if gap {
		h.queueNotice(c, Notice{Kind: NoticeGap, Topic: topic, Seq: last, Epoch: epoch})
	}
	for _, n := range backlog {
		if n.epoch != epoch { // the history started over meanwhile
			epoch, last = n.epoch, 0
			h.queueNotice(c, Notice{Kind: NoticeGap, Topic: topic, Epoch: epoch, Reset: true})
		}
		if n.seq > last {
			h.queue(c, n.pm)
			last = n.seq
		}
	}
	if overflow {
		h.queueNotice(c, Notice{Kind: NoticeGap, Topic: topic, Seq: last, Epoch: epoch})
	}
	h.queueNotice(c, Notice{Kind: NoticeRecovered, Topic: topic, Seq: last, Epoch: epoch})
	set.conns[c] = member{floor: last, epoch: epoch}
}

// queue queues pm for c with h.mu held: what the outbox refuses is counted,
// and a connection that failed leaves at the next message published to it.
func (h *Hub) queue(c *gust.Conn, pm *gust.PreparedMessage) {
	h.pending.Add(1)
	if err := c.WritePreparedAsync(pm, h.done); err != nil {
		h.pending.Add(-1)
		h.dropped.Add(1)
	}
}

func (h *Hub) queueNotice(c *gust.Conn, n Notice) {
	h.countNotice(n)
	if pm, err := h.hist.prepare(n); err == nil {
		h.queue(c, pm)
	}
}

// countNotice counts the gaps and resets in Stats.
func (h *Hub) countNotice(n Notice) {
	if n.Kind == NoticeGap {
		h.gaps.Add(1)
		if n.Reset {
			h.resets.Add(1)
		}
	}
}

// PublishOnce publishes a client's message to topic as Publish does, named
// by id, and calls ack once it is stored, with its position: a message
// the page can resend until it is acknowledged, kept once. id must name
// the message among all the senders' (say the sender's user and an ID its
// page made at random for the message; a client that could pick another
// sender's id could have its message taken for theirs); the Hub hashes
// it, so any length costs 32 bytes.
//
// With a HistoryBroker, a message whose id was stored within the Broker's
// duplicate window (2 min by default, MemoryHistory's and cluster/nats's)
// is not stored or delivered again: ack gets the position of the one
// stored. A resend after the window is stored again: keep the pages'
// resends within it. Without a history, the message is published at once
// and ack called with the zero Position, and a resend is published again.
// ack gets the Broker's error when the message could not be stored (it may
// have been: a resend is then acknowledged or stored). ack is called once,
// from the Broker's goroutine or before PublishOnce returns, and must not
// block: queue the acknowledgement with WriteAsync. When PublishOnce
// returns an error, ack is not called.
func (h *Hub) PublishOnce(topic string, op gust.Opcode, p []byte, id string, ack func(Position, error)) error {
	if h.hist == nil {
		err := h.Publish(topic, op, p)
		if err == nil && ack != nil {
			ack(Position{}, nil)
		}
		return err
	}
	if h.closed.Load() {
		return ErrClosed
	}
	sum := sha256.Sum256([]byte(id))
	return h.publishHistory(topic, false, nil, op, p, hex.EncodeToString(sum[:16]), ack)
}

// publishHistory hands the message to the HistoryBroker without waiting
// for it to be stored, named by id (empty: the Broker names it), and calls
// ack, if not nil, once it is stored or failed; the Broker brings it back,
// numbered, to every Hub: fromHistory delivers it, here too.
func (h *Hub) publishHistory(topic string, all bool, except *gust.Conn, op gust.Opcode, p []byte, id string, ack func(Position, error)) error {
	if op != gust.OpText && op != gust.OpBinary {
		return fmt.Errorf("gust: hub: publishing opcode %v: only text and binary messages", op)
	}
	var exceptID uint64
	if except != nil {
		h.mu.RLock()
		if r := h.conns[except]; r != nil {
			exceptID = r.id
		}
		h.mu.RUnlock()
	}
	err := h.hist.broker.PublishAsync(topic, h.envelope(all, op, p, exceptID), id, func(pos Position, err error) {
		if err != nil {
			h.log().Warn("gust: hub: the broker did not store a message", "topic", topic, "err", err)
		}
		if ack != nil {
			ack(pos, err)
		}
	})
	if err != nil {
		return fmt.Errorf("gust: hub: publishing to the broker: %w", err)
	}
	return nil
}

// fromHistory delivers a numbered message, from any Hub this one
// included. Called by the Broker's one handler goroutine, in order.
func (h *Hub) fromHistory(r Record) {
	if h.closed.Load() {
		return
	}
	env, err := decodeEnvelope(r.Msg)
	if err != nil {
		h.log().Warn("gust: hub: ignoring a broker message", "topic", r.Topic, "err", err)
		return
	}
	h.mu.RLock()
	set := h.topics[r.Topic]
	var except *gust.Conn
	if env.from == h.id && env.except != 0 {
		except = h.ids[env.except]
	}
	h.mu.RUnlock()
	if set == nil && !env.all {
		return // no subscriber here (a Broker that does not route by interest)
	}
	if !env.all {
		switch last := set.last.Load(); {
		case last != 0 && set.lastEpoch == r.Epoch && r.Prev > last && r.Seq > last:
			h.repair(r.Topic, r.Epoch, last, r.Seq)
		case last != 0 && set.lastEpoch != r.Epoch && r.Prev > 0:
			// The history started over, and stored messages of the topic
			// before this one that the Broker did not bring (they came
			// before this process's subscription was back): all of them.
			h.repair(r.Topic, r.Epoch, 0, r.Seq)
		}
		set.last.Store(r.Seq)
		set.lastEpoch = r.Epoch
	}
	pm, err := h.hist.prepare(Notice{Kind: NoticeMessage, Topic: r.Topic, Seq: r.Seq, Op: env.op, Data: env.payload})
	if err != nil {
		h.log().Warn("gust: hub: ignoring a broker message", "topic", r.Topic, "err", err)
		return
	}
	h.deliver(r.Topic, env.all, except, pm, numbered{epoch: r.Epoch, seq: r.Seq})
}

// repair delivers the messages of topic between after and before that the
// Broker did not bring (this process's connection to it broke, or dropped
// them), from the history.
func (h *Hub) repair(topic, epoch string, after, before uint64) {
	ctx, cancel := context.WithTimeout(h.hist.ctx, recoveryTimeout)
	defer cancel()
	err := h.hist.broker.History(ctx, topic, after+1, func(r Record) error {
		if r.Seq >= before || r.Epoch != epoch {
			return errStop
		}
		env, err := decodeEnvelope(r.Msg)
		if err != nil {
			return nil
		}
		pm, err := h.hist.prepare(Notice{Kind: NoticeMessage, Topic: topic, Seq: r.Seq, Op: env.op, Data: env.payload})
		if err == nil {
			h.deliver(topic, env.all, nil, pm, numbered{epoch: r.Epoch, seq: r.Seq})
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		h.log().Warn("gust: hub: recovering messages the broker did not bring", "topic", topic, "after", after, "err", err)
	}
}

var errStop = errors.New("stop")

// envelope is a decoded Hub envelope.
type envelope struct {
	all     bool
	op      gust.Opcode
	from    [8]byte
	except  uint64
	payload []byte
}

var errNotEnvelope = errors.New("not a hub envelope")

func decodeEnvelope(msg []byte) (envelope, error) {
	if len(msg) < envelopeHeader || msg[0] != envelopeVersion {
		return envelope{}, errNotEnvelope
	}
	e := envelope{all: msg[1]&envelopeAll != 0, op: gust.Opcode(msg[2]), from: [8]byte(msg[3:11])}
	rest := msg[envelopeHeader:]
	if msg[1]&envelopeExcept != 0 {
		if len(rest) < 8 {
			return envelope{}, errNotEnvelope
		}
		e.except = binary.BigEndian.Uint64(rest)
		rest = rest[8:]
	}
	e.payload = rest
	return e, nil
}
