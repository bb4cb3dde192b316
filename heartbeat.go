package gust

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/keepalive"
	"github.com/gustws/gust/internal/wheel"
	"github.com/gustws/gust/internal/wsframe"
)

// Heartbeats (Options.PingInterval) run on timing wheels (internal/wheel)
// that the whole process shares: at a connection's due tick, the wheel's
// goroutine checks it (Check) and pings it if silent (Fire). The read
// goroutine stores, atomically, the tick at which it began waiting for
// bytes, and hbBusy once they arrived: silence counts from the wait, never
// while a callback runs.

// hbBusy is heartbeat.seen while the read goroutine has bytes to dispatch.
const hbBusy = ^uint64(0)

// minWheelTick bounds the granularity of the wheels from below.
const minWheelTick = time.Millisecond

// hbWheel is the wheel of heartbeats of one tick length.
type hbWheel = wheel.Wheel[heartbeat, *heartbeat]

// heartbeat is a Conn's place in its wheel (48 bytes), made when its
// ReadLoop starts if Options.PingInterval is set.
type heartbeat struct {
	wheel.Entry[heartbeat]
	seen atomic.Uint64 // the tick the read goroutine began waiting at, or hbBusy
	c    *Conn

	// guarded by the wheel's lock (Check)
	ka keepalive.State // the tick a ping went out at for this silence
}

// wheelTick is the tick of the wheel for interval and timeout: a quarter of
// the shorter, so that a check comes at most a quarter late.
func wheelTick(interval, timeout time.Duration) time.Duration {
	return max(min(interval, timeout)/4, minWheelTick)
}

// startHeartbeat puts c in its wheel, starting the wheel's goroutine if it
// was the first; ReadLoop calls it before OnOpen.
func (c *Conn) startHeartbeat() {
	w := c.cfg.wheel
	if w == nil {
		return
	}
	hb := &heartbeat{c: c}
	hb.seen.Store(hbBusy) // OnOpen runs first
	w.Add(hb, c.cfg.pingTicks)
	c.hb = hb // only the read goroutine uses c.hb
}

// stopHeartbeat takes c out of its wheel, stopping the wheel's goroutine if
// it was the last; finish calls it.
func (c *Conn) stopHeartbeat() {
	hb := c.hb
	if hb == nil {
		return
	}
	c.hb = nil
	c.cfg.wheel.Remove(hb)
}

// Fire sends the connection a ping, which Check found due: on the wheel's
// goroutine, after the tick's checks.
func (hb *heartbeat) Fire() {
	// The wheel's goroutine must never wait for a peer: the ping is written
	// at once when the connection is idle (the usual case), else queued in
	// its outbox.
	if !hb.tryPingNow() {
		hb.queuePing()
	}
}

// Check checks its connection at tick t (keepalive.State.Check), on the
// wheel's goroutine under its lock: one silent for PingInterval is due a
// ping (fire), one still silent PingTimeout after it is cut (on a goroutine
// of its own). It returns the tick of the next check.
func (hb *heartbeat) Check(t uint64) (due uint64, fire bool) {
	c := hb.c
	seen := hb.seen.Load()
	// Alive, or ending another way (CloseTimeout bounds the closing
	// handshake): look again later; finish takes c out.
	alive := seen == hbBusy || c.closing.has(closeSent|netClosed)
	due, act := hb.ka.Check(t, seen, alive, c.cfg.pingTicks, c.cfg.pingTimeoutTicks)
	if act == keepalive.Cut {
		err := fmt.Errorf("gust: no frame from the peer for %v (PingInterval %v + PingTimeout %v): %w",
			time.Duration(t-seen)*c.cfg.wheel.Tick(), c.cfg.PingInterval, c.cfg.PingTimeout, os.ErrDeadlineExceeded)
		// Closing a tls.Conn may write an alert, and wait for it:
		// not on the wheel's goroutine.
		go c.abort(err)
	}
	return due, act == keepalive.Ping
}

// tryPingNow writes an empty ping if that cannot wait, and reports whether
// it did. What the socket did not take stays corked, flushed by the ping
// then queued behind it (a second ping, harmless).
func (hb *heartbeat) tryPingNow() bool {
	c := hb.c
	w := &c.wr
	if !c.direct() || !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	if w.buf != nil || w.corked || w.writableLocked() != nil {
		return false
	}
	var f [2 + 4]byte
	var key [4]byte
	if !c.server {
		key = w.maskKey()
	}
	hn := wsframe.Put(f[:], opPing, 0, !c.server, key)
	n, err := c.tr.write(f[:hn], true)
	switch {
	case err != nil:
		w.err = err // the next write or read ends the connection
		return true
	case n == 0:
		return false
	case n < hn:
		w.buf = bufpool.Get(c.cfg.WriteBufferSize)
		*w.buf = append((*w.buf)[:0], f[n:hn]...)
		return false
	case w.backlog != nil: // TLS kept the ping's record: the outbox's writer writes it
		return false
	}
	return true
}

// queuePing queues an empty ping in the connection's outbox, whatever its size and
// policy (at most one is queued: the next comes after a frame arrived).
// An open NextWriter's next fragment takes it along too, since the outbox's
// writer may be waiting for that message to end.
func (hb *heartbeat) queuePing() {
	c := hb.c
	if c.wr.writerOpen.Load() {
		c.wr.pingDue.Store(true)
	}
	o := c.wr.box()
	o.mu.Lock()
	if o.state != outboxOpen {
		o.mu.Unlock()
		return
	}
	o.pushLocked(outboxItem{op: opPing})
}
