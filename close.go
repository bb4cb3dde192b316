package gust

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// The closing handshake, from Close and CloseNow to finish and OnClose.

// closeState is how far a connection has got in ending: the steps below,
// taken once and never undone (but for a pending Conn's opening), and the
// code of gust's close frame, in one atomic word; and the reason recorded
// for OnClose when something outside the read loop ends it. The steps the
// write path checks are taken under the write lock.
type closeState struct {
	why atomic.Pointer[error] // the first reason recorded
	v   atomic.Uint32
}

const (
	closeWriting  uint32 = 1 << iota // writeState.closeFrame is writing: the one write allowed once the connection is ending
	closeSent                        // gust's close frame was written (or failed to be): writes fail, incoming messages are dropped
	closeReceived                    // the peer's close frame was read
	netClosed                        // the net.Conn is closed, or a pending Conn has none yet
	closeEnded                       // finish ran: the buffers are back, writes waiting for a NextWriter fail
	closeDue                         // a Shutdown has started: its close frame is coming, and writes fail as after it

	sentCodeShift = 16 // the code of gust's close frame, once written, sits above the steps
)

// has reports whether any of the steps is taken.
func (s *closeState) has(steps uint32) bool { return s.v.Load()&steps != 0 }

// take takes step and reports whether this call took it.
func (s *closeState) take(step uint32) bool { return s.v.Or(step)&step == 0 }

// pending marks a Conn whose handshake is in progress as closed, so that
// what refuses on a closed Conn refuses on it too; opened undoes it.
func (s *closeState) pending() { s.v.Or(netClosed) }
func (s *closeState) opened()  { s.v.And(^netClosed) }

// startSending begins the write of gust's close frame, under the write
// lock, and reports whether it may: only the first one is written.
func (s *closeState) startSending() bool {
	if s.has(closeSent) {
		return false
	}
	s.v.Or(closeWriting)
	return true
}

// sent ends the write startSending began: gust's close frame is on its
// way, or its write failed; either way no other frame follows it.
func (s *closeState) sent() {
	s.v.Or(closeSent)
	s.v.And(^closeWriting)
}

// flushed records code as the close frame that reached the socket, for
// Metrics.Closed.
func (s *closeState) flushed(code StatusCode) { s.v.Or(uint32(code) << sentCodeShift) }

// sentCode returns the code of the close frame gust wrote, or 0.
func (s *closeState) sentCode() StatusCode { return StatusCode(s.v.Load() >> sentCodeShift) }

// received records the peer's close frame and reports whether the peer
// started the closing handshake: gust had not sent its own close frame.
func (s *closeState) received() (byPeer bool) { return s.v.Or(closeReceived)&closeSent == 0 }

// record keeps err as the reason the connection ends, unless one is kept
// already.
func (s *closeState) record(err error) { s.why.CompareAndSwap(nil, &err) }

// recorded returns the reason record kept, or nil.
func (s *closeState) recorded() error {
	if p := s.why.Load(); p != nil {
		return *p
	}
	return nil
}

// Close starts the closing handshake: it sends a close frame with code and
// reason, after which no more messages can be written, and returns; the
// connection ends when the peer answers with its close frame (OnClose then
// receives a *CloseError), or after Options.CloseTimeout. Either side may
// send any code valid on the wire: 1000–1003, 1007–1014 (1001 going away
// for a server shutting down, 1008 for a policy violation, 1011 for an
// internal error) and 3000–4999 for libraries and applications; other
// codes return ErrInvalidCloseCode. The reason must be valid UTF-8 of at
// most 123 bytes. A Close after the first returns net.ErrClosed.
//
// The close frame waits for a write in progress, like any other write;
// CloseNow does not.
func (c *Conn) Close(code StatusCode, reason string) error {
	if !code.validOnWire() {
		return ErrInvalidCloseCode
	}
	if len(reason) > maxControlPayload-2 {
		return errControlTooLong
	}
	if !utf8.ValidString(reason) {
		return errInvalidUTF8
	}
	return c.startClose(code, reason)
}

// CloseNow closes the connection at once, without a closing handshake:
// the peer sees the TCP connection end (1006 abnormal closure on its side),
// a write blocked on the peer fails, and OnClose receives an error for
// which errors.Is(err, net.ErrClosed) holds. It returns net.ErrClosed when
// the connection had ended already.
func (c *Conn) CloseNow() error {
	if c.closing.has(netClosed) {
		return c.endedErr()
	}
	c.abort(errClosedNow)
	return nil
}

// startClose sends a close frame and bounds the wait for the answer.
func (c *Conn) startClose(code StatusCode, reason string) error {
	if err := c.wr.closeFrame(code, reason); err != nil {
		return err
	}
	c.setReadDeadline(time.Now().Add(c.cfg.CloseTimeout))
	return nil
}

// closeFrame sends a close frame once; later calls return net.ErrClosed.
func (w *writeState) closeFrame(code StatusCode, reason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closeFrameLocked(code, reason)
}

// closeFrameLocked is closeFrame under the write lock.
func (w *writeState) closeFrameLocked(code StatusCode, reason string) error {
	c := w.conn()
	var p [maxControlPayload]byte
	n := 0
	if code != 0 && code != StatusNoStatusReceived {
		binary.BigEndian.PutUint16(p[:], uint16(code))
		n = 2 + copy(p[2:], reason)
	}
	if c.conn == nil {
		// A zero Conn, or one whose handshake is still in progress: no
		// close frame counts as sent, so that the latter opens intact.
		return c.closedErr()
	}
	if !c.closing.startSending() {
		return errClosed
	}
	err := w.frameLocked(opClose, p[:n])
	c.closing.sent()
	if err == nil {
		err = w.flushLocked()
	}
	if err == nil {
		c.closing.flushed(code)
	}
	return err
}

// closeFrame checks the peer's close frame, answers it with the same code
// (unless gust sent its own close frame first) and returns it as an error.
func (rd *readState) closeFrame(p []byte) error {
	c := rd.c
	ce := &CloseError{Code: StatusNoStatusReceived}
	switch {
	case len(p) == 1:
		return protocolError(StatusProtocolError, "close payload of one byte")
	case len(p) >= 2:
		ce.Code = StatusCode(binary.BigEndian.Uint16(p))
		if !ce.Code.validOnWire() {
			return protocolError(StatusProtocolError, "invalid close code")
		}
		if !c.cfg.SkipUTF8Validation && !utf8.Valid(p[2:]) {
			return protocolError(StatusInvalidFramePayloadData, "close reason not valid UTF-8")
		}
		ce.Reason = string(p[2:])
	}
	ce.ByPeer = c.closing.received()
	c.wr.closeFrame(ce.Code, "")
	return ce
}

// end ends the connection for err, answering a protocol violation or a
// panic with its close frame first (failAndLinger).
func (c *Conn) end(err error) {
	// From an event loop, end runs on a goroutine of its own: the close
	// frame, and the backlog before it, may wait now.
	c.wr.mu.Lock()
	c.wr.noWait = false
	c.wr.mu.Unlock()
	var pe *ProtocolError
	var pa *PanicError
	switch {
	case errors.As(err, &pe):
		c.failAndLinger(pe.Code, pe.Reason)
	case errors.As(err, &pa):
		c.failAndLinger(StatusInternalError, "")
	}
	c.finish(err)
}

// failLinger bounds how long a connection gust failed stays open after its
// close frame, waiting for the peer to stop sending; failQuiet is how long
// the peer may stay silent before gust takes it that it has.
const (
	failLinger = time.Second
	failQuiet  = 100 * time.Millisecond
)

// failAndLinger sends a close frame with code, half-closes the TCP
// connection and discards what the peer still sends, so that unread bytes
// do not reset the connection before the peer reads the close frame. It
// stops when the peer closes its side, is silent for failQuiet, or after
// failLinger (at most CloseTimeout): a bad peer holds a descriptor briefly.
func (c *Conn) failAndLinger(code StatusCode, reason string) {
	if c.wr.closeFrame(code, reason) != nil {
		return
	}
	if _, ok := c.conn.(interface{ Delivered() }); ok {
		return // the transport delivers what was sent before it ends: no reset to fear
	}
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	end := time.Now().Add(min(failLinger, c.cfg.CloseTimeout))
	var scratch [512]byte
	for now := time.Now(); now.Before(end); now = time.Now() {
		dl := now.Add(failQuiet)
		if dl.After(end) {
			dl = end
		}
		c.conn.SetReadDeadline(dl)
		if _, err := c.conn.Read(scratch[:]); err != nil {
			return
		}
	}
}

// finish ends the connection: it closes the net.Conn, gives every buffer
// back, waits for parallel handlers and the outbox writer, and calls OnClose.
func (c *Conn) finish(err error) {
	c.stopHeartbeat()
	c.unpark()
	c.closeNet()
	c.pings.End()
	c.wr.mu.Lock()
	c.closing.take(closeEnded)
	if c.wr.writerEnd != nil {
		c.wr.writerEnd.Broadcast() // writes waiting for a NextWriter fail now
	}
	sent := c.closing.sentCode()
	c.wr.releaseBuffer()
	c.wr.releaseBacklog()
	if c.deflate != nil {
		c.deflate.Release()
	}
	c.wr.mu.Unlock()
	if c.rd != nil {
		c.rd.releaseAll()
	}
	c.wr.closeOutbox()
	c.inflight.Wait()
	if rec := c.closing.recorded(); rec != nil {
		// The recorded reason wins over an I/O error, and the peer's close
		// frame over the reason, except for a slow consumer: its peer only
		// answered the 1008 gust sent.
		var ce *CloseError
		if !errors.As(err, &ce) || errors.Is(rec, ErrSlowConsumer) {
			err = rec
		}
	}
	if c.tracker != nil {
		defer c.tracker.Forget(c) // after OnClose: Shutdown waits for it
	}
	c.reportClose(err, sent)
	c.callOnClose(err)
}

func (c *Conn) callOnClose(err error) {
	if !c.cfg.DisableRecovery {
		defer func() {
			if p := recover(); p != nil {
				c.cfg.logger().LogAttrs(context.Background(), slog.LevelError, "gust: panic in OnClose",
					c.remoteAttr(), slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
			}
		}()
	}
	c.handler.OnClose(c, err)
}

// abort records err as the reason the connection ends, unless one is
// recorded already, and closes the net.Conn so that the read loop stops.
func (c *Conn) abort(err error) {
	c.closing.record(err)
	c.closeNet()
	c.wake() // a parked connection has no goroutine to see the socket closed
}

func (c *Conn) closeNet() {
	if c.closing.take(netClosed) && c.conn != nil {
		c.unpark() // a Conn closed before its ReadLoop ran holds no event loop
		if t, ok := c.tr.(*tlsLoop); ok {
			t.close()
		} else {
			c.conn.Close()
		}
	}
}

// The ends the event loops hand over. A connection that ends on a loop
// (the peer's close frame, a read error) is ended on a goroutine, since its
// end may wait: the answer to the close frame on a full socket, OnClose.
// When many end at once (a Shutdown, a network failure), a goroutine each
// would put thousands of runnable goroutines in the scheduler's queue, and
// a loop that gave up its CPU (a system call, a preemption) would wait
// behind them all, with every connection it serves. So the loops queue the
// ends, and as many goroutines as GOMAXPROCS end them in turn. One whose end
// has run for endBlocked (an OnClose that waits on a database, a peer that
// does not take the answer) no longer counts, and another starts: ends that
// wait still overlap, as with a goroutine each.
type loopEnds struct {
	mu       sync.Mutex
	queue    []loopEnd // from head on
	head     int
	workers  []*endWorker
	max      int         // GOMAXPROCS, at the first end
	timer    *time.Timer // while ends wait: look for workers that block
	checking bool        // timer is armed
}

// loopEnd is a connection to end: err is why, nil for the peer's close
// frame, read but not yet parsed (serveOffLoop parses it and ends c).
type loopEnd struct {
	c   *Conn
	err error
}

// endWorker is a goroutine of loopEnds.
type endWorker struct {
	since atomic.Int64 // when its end in progress started (endClock), 0 between ends
}

// endBlocked is how long an end runs before loopEnds takes it that it
// waits, and starts another goroutine in its place: far longer than
// gust's own part of an end, tens of microseconds.
const endBlocked = time.Millisecond

var (
	ends     loopEnds
	endEpoch = time.Now()
)

// endClock is the time since endEpoch, never 0.
func endClock() int64 { return int64(time.Since(endEpoch)) | 1 }

// add queues c's end, for err (nil: the peer's close frame).
func (e *loopEnds) add(c *Conn, err error) {
	e.mu.Lock()
	if e.head > 256 && e.head > len(e.queue)/2 { // never empty: drop what was taken
		n := copy(e.queue, e.queue[e.head:])
		clear(e.queue[n:])
		e.queue, e.head = e.queue[:n], 0
	}
	e.queue = append(e.queue, loopEnd{c, err})
	e.startLocked()
	e.mu.Unlock()
}

// startLocked starts workers until as many as max are free to take the
// queued ends (idle, or running an end that has not run for endBlocked),
// and arms the timer if ends still wait for a worker.
func (e *loopEnds) startLocked() {
	if e.max == 0 {
		e.max = runtime.GOMAXPROCS(0)
	}
	waiting := len(e.queue) - e.head
	now := endClock()
	free := 0
	for _, w := range e.workers {
		if s := w.since.Load(); s == 0 || now-s < int64(endBlocked) {
			free++
		}
	}
	for ; free < e.max && free < waiting; free++ {
		w := new(endWorker)
		e.workers = append(e.workers, w)
		go e.run(w)
	}
	if waiting > free && !e.checking {
		e.checking = true
		if e.timer == nil {
			e.timer = time.AfterFunc(endBlocked, e.check)
		} else {
			e.timer.Reset(endBlocked)
		}
	}
}

// check runs endBlocked after ends waited for a worker.
func (e *loopEnds) check() {
	e.mu.Lock()
	e.checking = false
	e.startLocked()
	e.mu.Unlock()
}

// run ends the queued connections in turn, and returns once none is left.
func (e *loopEnds) run(w *endWorker) {
	for {
		e.mu.Lock()
		if e.head == len(e.queue) {
			e.workers = slices.DeleteFunc(e.workers, func(x *endWorker) bool { return x == w })
			if cap(e.queue) > 1024 {
				e.queue = nil // give back what a crowd that left used
			}
			e.queue, e.head = e.queue[:0], 0
			e.mu.Unlock()
			return
		}
		end := e.queue[e.head]
		e.queue[e.head] = loopEnd{}
		e.head++
		w.since.Store(endClock())
		e.mu.Unlock()
		if end.err == nil {
			end.c.serveOffLoop()
		} else {
			end.c.end(end.err)
		}
		w.since.Store(0)
	}
}
