package hub

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gustws/gust"
)

// ErrNoHistory is returned by SubscribeSince on a Hub whose Broker is not a
// HistoryBroker.
var ErrNoHistory = errors.New("gust: hub: the broker keeps no history")

// NoticeKind tells what a Notice says.
type NoticeKind uint8

const (
	// NoticeMessage is a published message: Seq is its topic sequence,
	// Op and Data the message.
	NoticeMessage NoticeKind = iota
	// NoticeGap says that messages published to the topic after Seq may
	// never reach the connection: the history no longer holds them. What
	// the history still holds follows.
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
	Op    gust.Opcode // NoticeMessage: the message's opcode
	Data  []byte      // NoticeMessage: the payload as published
}

// FrameJSON is the default Options.Frame: a JSON object in a text message,
//
//	{"topic":"room-1","seq":42,"data":{"text":"hi"}}   a message
//	{"topic":"room-1","gap":40}                        messages after 40 may be lost
//	{"topic":"room-1","recovered":42}                  caught up: what follows is live
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
	case NoticeRecovered:
		dst = append(dst, `,"recovered":`...)
		dst = strconv.AppendUint(dst, n.Seq, 10)
	}
	return append(dst, '}'), gust.OpText
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

// Bounds of a recovery: how long it may take before the rest counts as a
// gap, and how many live messages it keeps for its connection meanwhile.
const (
	recoveryTimeout = 30 * time.Second
	recoveryBacklog = 4096
)

// history is what a Hub with a HistoryBroker keeps besides its maps: the
// Broker, the framing, and the recoveries under way.
type history struct {
	broker HistoryBroker
	frame  func(dst []byte, n Notice) ([]byte, gust.Opcode)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newHistory(b HistoryBroker, frame func([]byte, Notice) ([]byte, gust.Opcode)) *history {
	if frame == nil {
		frame = FrameJSON
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &history{broker: b, frame: frame, ctx: ctx, cancel: cancel}
}

func (hs *history) close() {
	hs.cancel()
	hs.wg.Wait()
}

// prepare frames n as one message for every receiver.
func (hs *history) prepare(n Notice) (*gust.PreparedMessage, error) {
	p, op := hs.frame(nil, n)
	return gust.NewPreparedMessage(op, p)
}

// replay is a connection's recovery of a topic: the live messages that
// arrive while the history is read wait here.
type replay struct {
	mu       sync.Mutex
	backlog  []numbered
	overflow bool // past recoveryBacklog: the rest is a gap
}

type numbered struct {
	seq uint64
	pm  *gust.PreparedMessage
}

// later keeps a live message for after the recovery.
func (rp *replay) later(seq uint64, pm *gust.PreparedMessage) {
	rp.mu.Lock()
	if len(rp.backlog) < recoveryBacklog {
		rp.backlog = append(rp.backlog, numbered{seq, pm})
	} else {
		rp.overflow = true
	}
	rp.mu.Unlock()
}

// SubscribeSince subscribes c to topic, as Subscribe does, and first sends
// c what the Broker's history holds of topic after sequence since — all it
// holds for since 0 — then the messages published from then on: every
// message once, in order, each framed with its sequence (Options.Frame). A
// client that reconnects, to this process or any other of the cluster,
// passes the last sequence it received and so misses nothing that the
// history still holds. When the history no longer reaches back to since,
// c gets a NoticeGap first; a NoticeRecovered ends the recovery.
//
// SubscribeSince returns at once: a goroutine reads the history and writes
// it to c (waiting for c's writes, each bounded by gust.Options.WriteTimeout),
// for at most 30 s, after which what it did not send counts as a gap; live
// messages that arrive meanwhile wait for it, up to 4,096, past which they
// count as a gap too. Close ends the recoveries under way. If c is
// subscribed to topic already, SubscribeSince does nothing. It returns
// ErrNoHistory without a HistoryBroker, ErrClosed after Close.
func (h *Hub) SubscribeSince(c *gust.Conn, topic string, since uint64) error {
	if h.hist == nil {
		return ErrNoHistory
	}
	rp := new(replay)
	added, err := h.subscribe(c, topic, rp)
	if err != nil || !added {
		return err
	}
	h.hist.wg.Add(1)
	go h.recover(c, topic, since, rp)
	return nil
}

// recover writes to c what topic's history holds after since, then what
// came live meanwhile, and makes c a live receiver of topic.
func (h *Hub) recover(c *gust.Conn, topic string, since uint64, rp *replay) {
	defer h.hist.wg.Done()
	ctx, cancel := context.WithTimeout(h.hist.ctx, recoveryTimeout)
	defer cancel()
	last, first := since, true
	var werr error
	err := h.hist.broker.History(ctx, topic, since, func(r Record) error {
		if first {
			first = false
			if since > 0 && r.Seq != since {
				werr = h.writeNotice(c, Notice{Kind: NoticeGap, Topic: topic, Seq: since})
			}
		}
		if r.Seq <= last || werr != nil {
			return werr
		}
		env, err := decodeEnvelope(r.Msg)
		if err != nil {
			h.log().Warn("gust: hub: skipping a history record", "topic", topic, "seq", r.Seq, "err", err)
			return nil
		}
		pm, err := h.hist.prepare(Notice{Kind: NoticeMessage, Topic: topic, Seq: r.Seq, Op: env.op, Data: env.payload})
		if err == nil {
			werr = c.WritePrepared(pm)
			h.counted(werr)
		}
		last = r.Seq
		return werr
	})
	if werr != nil {
		h.Remove(c) // the connection failed: nothing more to send it
		return
	}
	gap := err != nil || first && since > 0 // unreadable, or nothing left from since on
	if err != nil {
		h.log().Warn("gust: hub: recovering a topic from the broker's history", "topic", topic, "since", since, "err", err)
	}
	h.goLive(c, topic, rp, last, gap)
}

// goLive sends c, after its recovery, the live messages that waited, and
// makes it a live receiver of topic — under h.mu, so that no live message
// comes between.
func (h *Hub) goLive(c *gust.Conn, topic string, rp *replay, last uint64, gap bool) {
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
		h.queueNotice(c, Notice{Kind: NoticeGap, Topic: topic, Seq: last})
	}
	for _, n := range backlog {
		if n.seq > last {
			h.queue(c, n.pm)
			last = n.seq
		}
	}
	if overflow {
		h.queueNotice(c, Notice{Kind: NoticeGap, Topic: topic, Seq: last})
	}
	h.queueNotice(c, Notice{Kind: NoticeRecovered, Topic: topic, Seq: last})
	set.conns[c] = member{floor: last}
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
	if pm, err := h.hist.prepare(n); err == nil {
		h.queue(c, pm)
	}
}

func (h *Hub) writeNotice(c *gust.Conn, n Notice) error {
	pm, err := h.hist.prepare(n)
	if err != nil {
		return nil // a Frame that makes an invalid message: nothing sent
	}
	return c.WritePrepared(pm)
}

// counted counts a message written by a recovery.
func (h *Hub) counted(err error) {
	if err == nil {
		h.delivered.Add(1)
	} else {
		h.dropped.Add(1)
	}
}

// publishHistory hands the message to the HistoryBroker, which brings it
// back, numbered, to every Hub: fromHistory delivers it, here too.
func (h *Hub) publishHistory(topic string, all bool, except *gust.Conn, op gust.Opcode, p []byte) error {
	if op != gust.OpText && op != gust.OpBinary {
		return fmt.Errorf("gust: hub: publishing opcode %v: only text and binary messages", op)
	}
	var id uint64
	if except != nil {
		h.mu.RLock()
		if r := h.conns[except]; r != nil {
			id = r.id
		}
		h.mu.RUnlock()
	}
	if err := h.broker.Publish(topic, h.envelope(all, op, p, id)); err != nil {
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
	if set != nil && !env.all {
		if last := set.last.Load(); last != 0 && r.Prev > last && r.Seq > last {
			h.repair(r.Topic, last, r.Seq)
		}
		set.last.Store(r.Seq)
	}
	pm, err := h.hist.prepare(Notice{Kind: NoticeMessage, Topic: r.Topic, Seq: r.Seq, Op: env.op, Data: env.payload})
	if err != nil {
		h.log().Warn("gust: hub: ignoring a broker message", "topic", r.Topic, "err", err)
		return
	}
	h.deliver(r.Topic, env.all, except, pm, r.Seq)
}

// repair delivers the messages of topic between after and before that the
// Broker did not bring (this process's connection to it broke, or dropped
// them), from the history.
func (h *Hub) repair(topic string, after, before uint64) {
	ctx, cancel := context.WithTimeout(h.hist.ctx, recoveryTimeout)
	defer cancel()
	err := h.hist.broker.History(ctx, topic, after+1, func(r Record) error {
		if r.Seq >= before {
			return errStop
		}
		env, err := decodeEnvelope(r.Msg)
		if err != nil {
			return nil
		}
		pm, err := h.hist.prepare(Notice{Kind: NoticeMessage, Topic: topic, Seq: r.Seq, Op: env.op, Data: env.payload})
		if err == nil {
			h.deliver(topic, env.all, nil, pm, r.Seq)
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
