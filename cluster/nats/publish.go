package gustnats

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gustws/gust/hub"
)

// What PublishAsync's goroutine does with the messages handed to it, and
// the limits it keeps.
const (
	// defaultPublishQueue is HistoryOptions.PublishQueue's default.
	defaultPublishQueue = 4096
	// publishWindow bounds the messages sent to the stream and not yet
	// acknowledged (of as many topics).
	publishWindow = 256
	// attemptTimeout bounds the wait for one attempt's acknowledgement.
	attemptTimeout = time.Second
	// retryWait separates two attempts of a message the stream refused.
	retryWait = 50 * time.Millisecond
	// checkRetry separates two look-ups of the stream that failed.
	checkRetry = 250 * time.Millisecond
	// inSize is the queue of acknowledgements and advisories: more than
	// the window can bring, with room for late answers to retried
	// messages. Past it nats.go drops what comes (and reports a slow
	// consumer): a dropped acknowledgement is a message sent again, kept
	// once.
	inSize = 4 * publishWindow
)

// ErrQueueFull is PublishAsync's (and Publish's) error when
// HistoryOptions.PublishQueue messages are already waiting for the stream:
// the message is not taken.
var ErrQueueFull = errors.New("gustnats: the history's publish queue is full")

// ErrClosed is the error of PublishAsync and Publish after Close, or once
// the broker's NATS connection has closed, and the one done gets for the
// messages they still held then.
var ErrClosed = errors.New("gustnats: the history broker is closed")

// errNotSent is done's error for a message whose PublishTimeout passed
// before it could be sent.
var errNotSent = errors.New("gustnats: storing the message: not sent within PublishTimeout (the NATS connection down, or the topic's message before it failing)")

// PublishAsync stores msg in the topic's history without waiting: it copies
// msg into the broker's queue and returns, with ErrQueueFull when
// HistoryOptions.PublishQueue messages are waiting already, with ErrClosed
// after Close. Then done, unless nil, is called once, from the broker's
// goroutine, with the position the stream stored the message at (its epoch
// and sequence), or with the error that kept it out once PublishTimeout has
// passed (within a second of it); done must not block. done is called in
// the order PublishAsync took the messages, whatever their topics.
//
// The messages of a topic are stored in the order PublishAsync took them,
// whatever fails: a topic has one message in flight at a time, the next is
// sent once the stream has acknowledged it (or it was given up). Messages
// of different topics are sent without waiting for each other, up to 256
// in flight, and may be stored in another order than they were taken.
// Each message has a message ID, so that one sent again (its
// acknowledgement lost, the NATS server away, the stream gone and made
// again) is stored once: id when it is not empty, which makes a message
// handed over again with the same id within the stream's duplicate window
// (HistoryOptions.DuplicateWindow) stored once too, done getting the
// position of the one stored. While the NATS connection is down nothing is sent:
// the messages wait in the queue.
func (b *HistoryBroker) PublishAsync(topic string, msg []byte, id string, done func(hub.Position, error)) error {
	p := &pending{subject: b.prefix + "h." + encodeTopic(topic), data: append([]byte(nil), msg...), id: id, done: done, deadline: time.Now().Add(b.timeout)}
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if b.queued.Add(1) > b.queueMax {
		b.queued.Add(-1)
		return ErrQueueFull
	}
	b.queue <- p // never blocks: queued bounds what the channel holds
	return nil
}

// Publish stores msg in the topic's history, and returns once the stream
// has it, or after PublishTimeout if the NATS server stays away or refuses
// it (the message may then have been stored anyway). It is PublishAsync
// and a wait for done: the two keep one order.
func (b *HistoryBroker) Publish(topic string, msg []byte) error {
	ch := make(chan error, 1)
	if err := b.PublishAsync(topic, msg, "", func(_ hub.Position, err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

// Close ends the broker's goroutine: done is called for each message
// PublishAsync still holds, in order (with ErrClosed, or with its position
// for one stored whose report waited for an earlier message), and
// PublishAsync refuses what follows. It unsubscribes what NewHistory
// subscribed; SubscribeHistory's subscriptions end with their Unsubscribe
// (the Hub's Close). It does not close the NATS connection; closing that
// closes the broker too. Close returns once the goroutine has ended; it
// always returns nil.
func (b *HistoryBroker) Close() error {
	b.closeMu.Lock()
	b.closed = true
	b.closeMu.Unlock()
	b.cancel()
	<-b.stopped
	return nil
}

// pending is a message PublishAsync took, from the queue to its report.
type pending struct {
	subject  string
	data     []byte
	id       string // the message ID the caller gave, if any
	done     func(hub.Position, error)
	deadline time.Time // given up when it has not been stored by then

	token    uint64    // its place in the order, and its reply subject's last token
	msg      *nats.Msg // what is sent, made once it leaves the queue
	state    pendState
	attempt  uint32    // attempts sent
	due      time.Time // sent: when its acknowledgement is late
	retry    time.Time // failed: when it may go again
	failedAt time.Time
	gone     bool  // failed: the stream was not there
	err      error // failed, refused: why
	pos      hub.Position
}

type pendState uint8

const (
	waiting pendState = iota // not sent yet
	sent                     // sent, its acknowledgement awaited
	failed                   // its last attempt failed; it goes again
	stored                   // acknowledged: pos holds where
	refused                  // it will not be stored: err says why
)

// attemptRef is an attempt in the goroutine's queues of attempts in flight
// and of failures; it is stale once its message has moved on.
type attemptRef struct {
	x       *pending
	attempt uint32
}

// publisher is the state of the broker's goroutine, which alone touches it.
type publisher struct {
	b    *HistoryBroker
	next uint64 // token of the next message taken

	win      []*pending            // taken, not reported, in order: tokens consecutive
	topics   map[string][]*pending // per subject, its messages not stored: the first may be in flight
	ready    []string              // subjects whose first message waits to be sent (or was, since)
	flight   []attemptRef          // sent, in order of sending
	failures []attemptRef          // failed, in order of failing
	inflight int
	highest  uint64 // the highest sequence acknowledged as new

	check     bool // look the stream up (reconnected), make it if gone
	checkAt   time.Time
	made      time.Time // when the last successful ensureStream started
	stale     bool      // an advisory came: look the stream up
	staleAt   time.Time
	connected bool // the NATS connection was up at the last step
	timer     *time.Timer
}

// run is the broker's goroutine: it sends what PublishAsync queues, reads
// the acknowledgements and JetStream's advisories, and looks the stream up
// when the connection comes back.
func (b *HistoryBroker) run() {
	p := &publisher{b: b, topics: make(map[string][]*pending), timer: time.NewTimer(time.Hour)}
	p.timer.Stop()
	defer close(b.stopped)
	defer p.shut()
	for {
		now := time.Now()
		p.step(now)
		if wake := p.wake(); !wake.IsZero() {
			p.timer.Reset(max(time.Until(wake), 0))
		}
		select {
		case <-b.ctx.Done():
			return
		case st := <-b.status:
			if st == nats.CLOSED {
				return
			}
			p.check, p.checkAt = true, time.Time{}
		case m := <-b.in:
			p.receive(m, time.Now())
		case x := <-b.queue:
			p.take(x)
		case <-p.timer.C:
		}
		p.timer.Stop()
	}
}

// take puts a message handed to PublishAsync behind the others.
func (p *publisher) take(x *pending) {
	b := p.b
	x.token = p.next
	p.next++
	tok := strconv.FormatUint(x.token, 10)
	id := x.id
	if id == "" {
		id = b.id + "-" + tok
	}
	x.msg = &nats.Msg{Subject: x.subject, Reply: b.replyPrefix + tok, Data: x.data, Header: nats.Header{jetstream.MsgIDHeader: {id}}}
	p.win = append(p.win, x)
	q := p.topics[x.subject]
	if len(q) == 0 {
		p.ready = append(p.ready, x.subject)
	}
	p.topics[x.subject] = append(q, x)
}

// step does what is due: marks late acknowledgements as failures, reports
// the settled messages at the head, looks the stream up, sends again what
// failed, and sends what may be sent.
func (p *publisher) step(now time.Time) {
	b := p.b
	for len(p.flight) > 0 {
		a := p.flight[0]
		if a.x.state == sent && a.x.attempt == a.attempt {
			if now.Before(a.x.due) {
				break // sent in order: the later ones are due later
			}
			p.fail(a.x, fmt.Errorf("no acknowledgement within %v", attemptTimeout), false, now)
		}
		p.flight = p.flight[1:]
	}
	for len(p.win) > 0 {
		x := p.win[0]
		switch {
		case x.state == stored:
			p.report(x.pos, nil)
		case x.state == refused:
			p.report(hub.Position{}, x.err)
		case x.state == waiting && !now.Before(x.deadline):
			x.state = refused
			p.settle(x)
			p.report(hub.Position{}, errNotSent)
		case x.state == failed && !now.Before(x.deadline):
			x.state = refused
			p.settle(x)
			p.report(hub.Position{}, fmt.Errorf("gustnats: storing the message (it may have been stored): %w", x.err))
		default:
			goto reported
		}
	}
reported:
	if p.connected = b.nc.IsConnected(); !p.connected {
		return
	}
	if p.check && !now.Before(p.checkAt) {
		p.ensure()
		now = time.Now()
	}
	if p.stale && !now.Before(p.staleAt) {
		if _, err := b.lookStream(b.ctx); err != nil {
			p.staleAt = time.Now().Add(checkRetry)
		} else {
			p.stale = false
		}
		now = time.Now()
	}
	for len(p.failures) > 0 && p.inflight < publishWindow {
		a := p.failures[0]
		x := a.x
		if x.state != failed || x.attempt != a.attempt {
			p.failures = p.failures[1:]
			continue
		}
		if now.Before(x.retry) {
			break
		}
		if x.gone && !p.made.After(x.failedAt) {
			if !p.ensure() {
				x.retry = p.checkAt
				break
			}
			now = time.Now()
		}
		p.failures = p.failures[1:]
		p.send(x, now)
	}
	for len(p.ready) > 0 && p.inflight < publishWindow {
		subject := p.ready[0]
		p.ready = p.ready[1:]
		if q := p.topics[subject]; len(q) > 0 && q[0].state == waiting {
			p.send(q[0], now)
		}
	}
	if len(p.ready) == 0 {
		p.ready = p.ready[:0:0] // let the backing array go after a burst
	}
}

// ensure makes sure the stream is there, and reports whether it is.
func (p *publisher) ensure() bool {
	start := time.Now()
	if err := p.b.ensureStream(p.b.ctx); err != nil {
		p.check, p.checkAt = true, time.Now().Add(checkRetry)
		return false
	}
	p.check, p.stale, p.made = false, false, start
	return true
}

// send hands a message to nats.go, its acknowledgement due within
// attemptTimeout.
func (p *publisher) send(x *pending, now time.Time) {
	x.attempt++
	x.state, x.due = sent, now.Add(attemptTimeout)
	p.inflight++
	p.flight = append(p.flight, attemptRef{x, x.attempt})
	err := p.b.nc.PublishMsg(x.msg)
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		p.inflight--
		x.state, x.err = refused, fmt.Errorf("gustnats: storing the message: %w", err)
		p.settle(x)
	case err != nil:
		p.fail(x, err, false, now)
	}
}

// fail records a failed attempt: the message goes again after retryWait,
// before the topic's next one.
func (p *publisher) fail(x *pending, err error, gone bool, now time.Time) {
	if x.state == sent {
		p.inflight--
	}
	x.state, x.err, x.gone, x.failedAt, x.retry = failed, err, gone, now, now.Add(retryWait)
	p.failures = append(p.failures, attemptRef{x, x.attempt})
}

// settle takes a message that is stored, refused or given up off its
// topic's queue, so that the topic's next message may go.
func (p *publisher) settle(x *pending) {
	if x.state == sent {
		p.inflight--
	}
	q := p.topics[x.subject]
	if len(q) == 0 || q[0] != x {
		return // settled already
	}
	if len(q) == 1 {
		delete(p.topics, x.subject)
		return
	}
	q[0] = nil
	p.topics[x.subject] = q[1:]
	p.ready = append(p.ready, x.subject)
}

// report calls done for the head of the window and drops it.
func (p *publisher) report(pos hub.Position, err error) {
	x := p.win[0]
	p.win[0] = nil
	p.win = p.win[1:]
	if len(p.win) == 0 {
		p.win = p.win[:0:0]
	}
	p.b.queued.Add(-1)
	if x.done != nil {
		x.done(pos, err)
	}
}

// wake returns when step has something to do without a message arriving:
// the head's deadline, the first acknowledgement due, the first retry, a
// look-up to try again; zero for none. While the connection is down only
// the deadlines count: its return wakes the goroutine.
func (p *publisher) wake() time.Time {
	var t time.Time
	at := func(u time.Time) {
		if t.IsZero() || u.Before(t) {
			t = u
		}
	}
	if len(p.win) > 0 {
		if h := p.win[0]; h.state == waiting || h.state == failed {
			at(h.deadline)
		}
	}
	for _, a := range p.flight {
		if a.x.state == sent && a.x.attempt == a.attempt {
			at(a.x.due)
			break
		}
	}
	if !p.connected {
		return t
	}
	if p.check {
		at(p.checkAt)
	}
	if p.stale {
		at(p.staleAt)
	}
	if p.inflight < publishWindow {
		for _, a := range p.failures {
			if a.x.state == failed && a.x.attempt == a.attempt {
				at(a.x.retry)
				break
			}
		}
	}
	return t
}

// receive takes an acknowledgement or an advisory.
func (p *publisher) receive(m *nats.Msg, now time.Time) {
	b := p.b
	tok, ok := strings.CutPrefix(m.Subject, b.replyPrefix)
	if !ok {
		// The stream was made (again): look it up before the next
		// acknowledgement, which the stream sends after this.
		p.stale, p.staleAt = true, time.Time{}
		return
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || len(p.win) == 0 || n < p.win[0].token || n-p.win[0].token >= uint64(len(p.win)) {
		return // a late answer to a message reported already
	}
	x := p.win[n-p.win[0].token]
	if x.state != sent && x.state != failed {
		return
	}
	var ack struct {
		jetstream.PubAck
		Error *jetstream.APIError `json:"error"`
	}
	var failure error
	gone := false
	switch {
	case streamGone(m):
		failure, gone = errStreamGone, true
	case json.Unmarshal(m.Data, &ack) != nil || ack.Stream == "" && ack.Error == nil:
		failure = fmt.Errorf("nats: not a JetStream acknowledgement: %.80q", m.Data)
	case ack.Error != nil:
		failure, gone = ack.Error, ack.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound
	}
	if failure != nil {
		if x.state == sent { // a late failure of an earlier attempt does not count
			p.fail(x, failure, gone, now)
		}
		return
	}
	if !ack.Duplicate {
		if ack.Sequence <= p.highest {
			// The stream started over: learn its epoch before this
			// message's.
			if _, err := b.lookStream(b.ctx); err != nil {
				p.stale, p.staleAt = true, time.Now().Add(checkRetry)
			} else {
				p.stale = false
			}
		}
		p.highest = ack.Sequence
	}
	p.settle(x)
	x.state, x.pos = stored, hub.Position{Epoch: b.Epoch(), Seq: ack.Sequence}
}

// shut ends the goroutine's work: PublishAsync refuses what follows, and
// every message it took is reported, in order: stored, or failed with
// ErrClosed.
func (p *publisher) shut() {
	b := p.b
	b.closeMu.Lock()
	b.closed = true
	b.closeMu.Unlock()
	b.cancel()
	for len(p.win) > 0 {
		if x := p.win[0]; x.state == stored {
			p.report(x.pos, nil)
		} else {
			p.report(hub.Position{}, ErrClosed)
		}
	}
	for {
		select {
		case x := <-b.queue:
			b.queued.Add(-1)
			if x.done != nil {
				x.done(hub.Position{}, ErrClosed)
			}
		default:
			for _, s := range b.subs {
				s.Unsubscribe()
			}
			b.nc.RemoveStatusListener(b.status)
			return
		}
	}
}
