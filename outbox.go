package gust

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/queue"
)

// OutboxPolicy is what a connection's outbox does with a message queued
// ([Conn.WriteAsync], [Conn.WritePreparedAsync]) while it already holds
// Options.OutboxSize messages: the peer reads more slowly than messages are
// queued for it.
type OutboxPolicy uint8

const (
	// OutboxReject, the default, refuses the new message: the call returns
	// ErrQueueFull and queues nothing, and the caller decides what to do.
	OutboxReject OutboxPolicy = iota

	// OutboxDropOldest discards the oldest queued message that is not being
	// written yet and queues the new one: the peer gets the latest
	// messages, with gaps. The call returns nil; the discarded message's
	// done, if any, receives ErrQueueFull.
	OutboxDropOldest

	// OutboxDropNewest discards the new message: the peer gets what was
	// queued first, with gaps. The call returns nil, as for a message
	// queued, and done, if any, receives ErrQueueFull at once: unlike
	// OutboxReject, the caller hands the message over and learns of the drop
	// only through done.
	OutboxDropNewest

	// OutboxCloseSlow discards the queue and closes the connection with 1008
	// (policy violation). The call returns ErrSlowConsumer, the discarded
	// messages' done functions receive it, and OnClose receives an error
	// for which errors.Is(err, ErrSlowConsumer) holds. Later calls, and
	// writes of any kind that were waiting for their turn, return
	// net.ErrClosed.
	//
	// The close frame goes out as soon as the socket takes it: right after
	// the frame being written, if any, which cannot be cut short. A peer
	// that reads again within Options.CloseTimeout of the overflow gets
	// what was in flight, then the 1008 close frame (Metrics.Closed reports
	// 1008, cause "slow"). One that does not is cut then: it sees the TCP
	// connection end, or a reset, and its side reports 1006 (abnormal
	// closure), as Metrics.Closed does here (cause "slow"), or 1008 when
	// its socket took the close frame all the same.
	OutboxCloseSlow
)

func (p OutboxPolicy) String() string {
	switch p {
	case OutboxReject:
		return "OutboxReject"
	case OutboxDropOldest:
		return "OutboxDropOldest"
	case OutboxDropNewest:
		return "OutboxDropNewest"
	case OutboxCloseSlow:
		return "OutboxCloseSlow"
	}
	return "OutboxPolicy(" + strconv.Itoa(int(p)) + ")"
}

// outbox is a connection's queue of asynchronous writes. A writer goroutine
// runs while it is not empty (drain); its fields are guarded by mu, which
// is never held while writing to the socket.
type outbox struct {
	c     *Conn
	mu    sync.Mutex
	queue queue.Queue[outboxItem] // waits to be written, oldest first
	busy  bool                    // a writer goroutine runs
	state uint8
	// writing: messages taken from the queue are being written (drain's
	// batch, writeNowLocked's message): relieveLocked must not write newer
	// ones before them.
	writing bool

	lastFanout uint64 // the sequence number of the last fan-out it got (fanout)
}

// box returns the outbox, made by the first call: most connections never
// queue a message.
func (w *writeState) box() *outbox {
	if o := w.out.Load(); o != nil {
		return o
	}
	w.out.CompareAndSwap(nil, &outbox{c: w.conn()})
	return w.out.Load()
}

// outboxEnded is the outbox of every connection that ended before it
// queued anything: closed, so that nothing is ever queued in it.
var outboxEnded = &outbox{state: outboxClosed}

const (
	outboxOpen    = iota
	outboxClosing // closed as slow: the writer sends the close frame
	outboxClosed  // the connection has ended
)

// The outbox's arrays come from two shared pools and go back when the
// writer exits: an idle connection holds none, and a broadcast does not
// allocate in steady state. A burst past queue.LargeCap grows its own.
var outboxArrays queue.Pool[outboxItem]

// outboxItem is a queued message: a prepared one, or op and p.
type outboxItem struct {
	pm   *PreparedMessage
	p    []byte
	done func(error)
	seq  uint64 // pm's fan-out sequence number (fanout)
	op   Opcode
}

// WriteAsync queues a message of type op (OpText or OpBinary) in the
// connection's outbox and returns without waiting for the socket. A
// short-lived writer goroutine, started when the outbox stops being empty
// and gone once it is empty again, writes the queued messages in order, all
// of a batch in one system call, and calls done (if not nil) with each
// one's result: nil once the message was handed to the kernel, or corked
// behind the read goroutine's own writes (which it flushes before its next
// read). p must not change until done is called. When the outbox is empty
// and no writer runs, WriteAsync writes the message itself, as far as the
// socket takes it at once, and calls done before it returns; what the
// socket does not take is kept and written next by a writer goroutine (a
// socket without a descriptor, such as TLS, always goes through the
// writer).
//
// The outbox holds Options.OutboxSize messages besides the batch being
// written; a message queued past that meets Options.OutboxPolicy, by
// default OutboxReject: WriteAsync returns ErrQueueFull and queues nothing.
// done is called exactly once if WriteAsync returns nil, and never
// otherwise: from the writer goroutine, from WriteAsync itself (above), or
// for a message a policy discards later, from the goroutine whose call
// discarded it. So done should return
// quickly, and must not wait for a lock that a goroutine queueing on this
// connection may hold while it does. Once a close frame has been sent or
// the connection has ended, WriteAsync returns net.ErrClosed.
func (c *Conn) WriteAsync(op Opcode, p []byte, done func(error)) error {
	if op != OpText && op != OpBinary {
		return errBadOpcode
	}
	return c.wr.enqueue(outboxItem{op: op, p: p, done: done})
}

// WritePreparedAsync queues a prepared message in the connection's outbox,
// to be written as [Conn.WritePrepared] would, and calls done (if not nil)
// with its result, exactly as [Conn.WriteAsync] does: a fan-out that never
// waits for a slow receiver. Any number of connections may queue the same
// PreparedMessage. A batch that holds only this message sends its frame as
// it is, without copying it into the write buffer. Like WriteAsync's, a
// message queued on an empty outbox is written at once by the caller, but
// for a fan-out that starts within a millisecond of the previous one's last
// message, on the connections that got that one too: those queue it for
// their writer goroutines, so that a publisher running flat out has what
// it publishes gathered into one write per connection, not one per message.
func (c *Conn) WritePreparedAsync(pm *PreparedMessage, done func(error)) error {
	if pm == nil {
		return errNilPrepared
	}
	if c.closing.has(netClosed | closeSent | closeDue) {
		return c.wr.enqueue(outboxItem{pm: pm}) // its error, without seqFor: a closing crowd costs a load each
	}
	return c.wr.enqueue(outboxItem{pm: pm, done: done, seq: pm.fan.seqFor()})
}

// A fan-out (a PreparedMessage queued on many connections) is written at
// once by the caller, connection by connection, as any message queued on an
// empty outbox: a push costs one system call per receiver and no goroutine.
// A caller publishing flat out would then write every delivery on its own.
// So a fan-out that starts within fanoutBackToBack of the previous one's
// last message is marked back to back, and a connection that got the
// previous fan-out too queues its message for its writer goroutine instead,
// where the messages that follow gather into one write.
//
// fanout is a PreparedMessage's place among the fan-outs: its sequence
// number, odd when it came back to back, taken at its first queueing.
type fanout struct{ seq atomic.Uint64 }

var (
	// fanoutBackToBack is the gap between two fan-outs under which the
	// second comes back to back (a variable for tests).
	fanoutBackToBack = time.Millisecond

	fanoutSeq   atomic.Uint64 // the last fan-out's sequence number, shifted left by one
	fanoutLast  atomic.Int64  // when a fan-out's message was last queued, in ns since fanoutEpoch
	fanoutEpoch = time.Now()
)

// seqFor returns the fan-out's sequence number (taking one at its first
// call), with its low bit set when it came back to back, and notes the time.
func (f *fanout) seqFor() uint64 {
	now := int64(time.Since(fanoutEpoch))
	prev := fanoutLast.Load()
	if now-prev >= int64(fanoutBackToBack)/16 {
		fanoutLast.Store(now) // coarse: a store per 62 µs at most
	}
	if s := f.seq.Load(); s != 0 {
		return s
	}
	s := fanoutSeq.Add(2)
	if now-prev < int64(fanoutBackToBack) {
		s |= 1
	}
	if !f.seq.CompareAndSwap(0, s) {
		return f.seq.Load()
	}
	return s
}

// backToBack reports whether it is a back-to-back fan-out's message for a
// connection that got the previous fan-out too (whose sequence number the
// outbox keeps in last), and records its own there.
func (it *outboxItem) backToBack(last *uint64) bool {
	if it.seq == 0 {
		return false
	}
	prev := *last
	*last = it.seq &^ 1
	return it.seq&1 != 0 && prev == it.seq&^1-2
}

// enqueue queues it, applying the policy when the outbox is full, and
// starts the writer unless it runs.
func (w *writeState) enqueue(it outboxItem) error {
	c := w.conn()
	if c.closing.has(netClosed) {
		return c.endedErr()
	}
	if c.closing.has(closeSent | closeDue) {
		return errClosed
	}
	o := w.box()
	var dropped outboxItem
	o.mu.Lock()
	if o.state != outboxOpen {
		o.mu.Unlock()
		return errClosed
	}
	if o.queue.Len() >= c.cfg.OutboxSize {
		defer o.relieveLocked().done() // relieves now; done runs once o.mu is released
	}
	if o.queue.Len() >= c.cfg.OutboxSize {
		m := c.cfg.Metrics
		switch c.cfg.OutboxPolicy {
		case OutboxDropOldest:
			dropped = o.queue.Pop()
			if m != nil {
				m.Queued(c, -1)
				m.Dropped(c, 1)
			}
		case OutboxCloseSlow:
			return o.closeSlowLocked()
		default: // OutboxReject, OutboxDropNewest
			o.mu.Unlock()
			if m != nil {
				m.Dropped(c, 1)
			}
			if c.cfg.OutboxPolicy != OutboxDropNewest {
				return ErrQueueFull
			}
			if it.done != nil {
				it.done(ErrQueueFull)
			}
			return nil
		}
	}
	if !it.backToBack(&o.lastFanout) && !o.busy && o.queue.Len() == 0 && c.direct() {
		o.writeNowLocked(it)
		return nil
	}
	o.pushLocked(it)
	if dropped.done != nil {
		dropped.done(ErrQueueFull)
	}
	return nil
}

// relieveLocked is a full outbox's last resort before OutboxPolicy, with
// o.mu held: the queue is full, but the peer is slow only if its socket is
// full too. The writer goroutine may merely not have run yet: a burst
// queued faster than it is scheduled (a thousand presence events to each
// member of a room, on a busy machine) would otherwise close, or drop
// messages to, a peer that reads at full speed. When no write is under
// way, the caller writes the oldest queued messages itself, in one batch,
// without waiting: until the socket is full, what it leaves going to the
// backlog (at most a write buffer and a message), which the writer goroutine
// writes first. Those messages leave the queue; their done functions are
// for the caller to call once o.mu is released. It holds o.mu while it
// writes, which takes no longer than the system calls: nothing waits.
func (o *outbox) relieveLocked() relieved {
	c := o.c
	w := &c.wr
	if o.state != outboxOpen || o.writing || !c.direct() || !w.mu.TryLock() {
		return nil
	}
	defer w.mu.Unlock()
	if w.writerOpen.Load() || w.noWait || w.corked || w.backlog != nil || w.err != nil {
		return nil // a NextWriter, an event loop's dispatch, a full socket, a failed one
	}
	q := o.queue.Items()
	n := 0
	w.noWait = true
	err := c.wr.batchLocked(func() {
		for n < len(q) && w.backlog == nil && w.err == nil {
			o.writeItem(&q[n]) // an error is sticky in w.err
			n++
		}
	})
	w.noWait = false
	if err == nil {
		err = w.err
	}
	var written relieved
	for i := range q[:n] {
		if q[i].done != nil {
			written = append(written, doneWith{q[i].done, err})
		}
	}
	o.queue.Discard(n)
	if m := c.cfg.Metrics; m != nil && n > 0 {
		m.Queued(c, -n)
	}
	if w.backlog != nil && o.startWriterLocked() {
		go o.drain() // writes the backlog, then what is queued
	}
	return written
}

// relieved holds the done functions of the messages relieveLocked wrote,
// and their result.
type relieved []doneWith

type doneWith struct {
	done func(error)
	err  error
}

func (r relieved) done() {
	for _, d := range r {
		d.done(d.err)
	}
}

// writeNowLocked writes it from the calling goroutine, taking the writer's
// place, and releases o.mu: a fan-out then costs one system call per
// connection and no goroutine (unless it comes back to back: fanout). It
// never waits: a held write lock queues it
// for a writer goroutine, and what the socket does not take goes to the
// backlog, which that goroutine writes first.
func (o *outbox) writeNowLocked(it outboxItem) {
	c := o.c
	o.startWriterLocked()
	o.writing = true
	o.mu.Unlock()
	w := &c.wr
	locked := w.mu.TryLock()
	if locked && w.writerOpen.Load() && it.op != opPing {
		w.mu.Unlock() // a NextWriter is open: the writer waits for it to close
		locked = false
	}
	if !locked {
		o.mu.Lock()
		o.writing = false
		o.pushLocked(it) // the writer is counted already: pushLocked does not start it
		go o.drain()
		return
	}
	loop := w.noWait // an event loop dispatches: it writes the backlog
	w.noWait = true
	err := o.writeItem(&it)
	w.noWait = loop
	backlog := w.backlog != nil && !loop
	w.mu.Unlock()
	if it.done != nil {
		it.done(err)
	}
	o.mu.Lock()
	o.writing = false
	if backlog || o.queue.Len() > 0 || o.state == outboxClosing {
		o.mu.Unlock()
		go o.drain() // still counted as the writer
		return
	}
	o.busy = false
	o.mu.Unlock()
	c.inflight.Done()
}

// pushLocked queues it and releases o.mu, starting the writer unless it
// runs. Metrics.Queued is told under o.mu, so that its sum never goes below 0.
func (o *outbox) pushLocked(it outboxItem) {
	o.queue.Push(&outboxArrays, &it)
	if m := o.c.cfg.Metrics; m != nil {
		m.Queued(o.c, 1)
	}
	start := o.startWriterLocked()
	o.mu.Unlock()
	if start {
		go o.drain()
	}
}

// startWriterLocked marks the writer as running and reports whether the
// caller must start it. Counted in inflight under o.mu, so finish waits for it.
func (o *outbox) startWriterLocked() bool {
	if o.busy {
		return false
	}
	o.busy = true
	o.c.inflight.Add(1)
	return true
}

// closeSlowLocked applies OutboxCloseSlow and unlocks o.mu: the queue goes,
// the reason is recorded for OnClose, and the writer sends the close frame
// once the batch it may be writing is out.
func (o *outbox) closeSlowLocked() error {
	c := o.c
	all := o.queue
	o.queue = queue.Queue[outboxItem]{}
	discarded := all.Items()
	o.state = outboxClosing
	c.closing.record(ErrSlowConsumer)
	time.AfterFunc(c.cfg.CloseTimeout, o.cutSlow)
	start := o.startWriterLocked()
	o.mu.Unlock()
	if start {
		go o.drain()
	}
	if m := c.cfg.Metrics; m != nil {
		if len(discarded) > 0 {
			m.Queued(c, -len(discarded))
		}
		m.Dropped(c, len(discarded)+1) // and the new message
	}
	for _, it := range discarded {
		if it.done != nil {
			it.done(ErrSlowConsumer)
		}
	}
	all.Release(&outboxArrays)
	return ErrSlowConsumer
}

// cutSlow ends a connection closed as slow whose close frame is not out
// CloseTimeout after the overflow: the write blocked on the peer fails.
func (o *outbox) cutSlow() {
	if c := o.c; !c.closing.has(closeSent | netClosed) {
		c.abort(ErrSlowConsumer)
	}
}

// closeOutbox refuses further messages once the connection has ended; a
// running writer still gives what is queued its error.
func (w *writeState) closeOutbox() {
	if w.out.CompareAndSwap(nil, outboxEnded) {
		return
	}
	if o := w.out.Load(); o != outboxEnded {
		o.mu.Lock()
		o.state = outboxClosed
		o.mu.Unlock()
	}
}

// drain is the writer goroutine: it writes the queue a batch at a time and
// exits when it is empty, or once it has sent the close frame of a
// connection closed as slow.
func (o *outbox) drain() {
	c := o.c
	defer c.inflight.Done()
	if c.direct() {
		// The backlog goes first; an event loop that dispatches writes its own.
		w := &c.wr
		w.mu.Lock()
		if !w.noWait {
			c.wr.failed(c.wr.backlogLocked())
		}
		w.mu.Unlock()
	}
	var spare queue.Queue[outboxItem] // the last batch's array, for the queue to reuse
	o.mu.Lock()
	for {
		if o.state == outboxClosing {
			o.busy = false
			o.mu.Unlock()
			spare.Release(&outboxArrays)
			c.startClose(StatusPolicyViolation, "slow consumer")
			return
		}
		if o.queue.Len() == 0 {
			o.busy = false
			o.queue.Release(&outboxArrays)
			o.mu.Unlock()
			spare.Release(&outboxArrays)
			return
		}
		all := o.queue
		batch := all.Items()
		o.queue = spare
		o.writing = true
		o.mu.Unlock()
		if m := c.cfg.Metrics; m != nil {
			m.Queued(c, -len(batch))
		}

		err := o.writeBatch(batch)
		for i := range batch {
			if done := batch[i].done; done != nil {
				done(err)
			}
		}
		all.Clear()
		spare = all
		o.mu.Lock()
		o.writing = false
	}
}

// writeBatch writes a batch under one write lock: one item as a direct
// write would, more corked and flushed in one system call. Every message
// gets the first error: how much of the corked bytes went out is unknown.
func (o *outbox) writeBatch(batch []outboxItem) error {
	c := o.c
	w := &c.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(batch) > 1 || batch[0].op != opPing {
		c.wr.waitStreamLocked() // a heartbeat's ping alone may go between fragments
	}
	if len(batch) == 1 {
		return o.writeItem(&batch[0])
	}
	var err error
	ferr := c.wr.batchLocked(func() {
		for i := range batch {
			if e := o.writeItem(&batch[i]); e != nil && err == nil {
				err = e
			}
		}
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = w.err // corked messages that a later write's failure kept from going out
	}
	return err
}

// writeItem writes it; the caller holds the write lock (not o.mu).
func (o *outbox) writeItem(it *outboxItem) error {
	if it.op == opPing { // a heartbeat's (queuePing)
		return o.c.wr.frameLocked(opPing, nil)
	}
	if it.pm != nil {
		return o.c.wr.preparedLocked(it.pm)
	}
	return o.c.wr.messageLocked(it.op, it.p, true)
}
