package gust

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/wheel"
)

// Heartbeats (Options.PingInterval) run on timing wheels (internal/wheel)
// that every connection of the process shares, not on a goroutine or a
// timer per connection. A connection's heartbeat is in the wheel of its
// tick, due at the tick of its next check; at that tick, the wheel's
// goroutine checks it (Check) and pings it if it is silent (Fire). A
// connection that keeps receiving is looked at about once per PingInterval;
// the goroutine runs only while the wheel has connections.
//
// The read goroutine tells the wheel what it does with two atomic stores
// per read, no lock: the tick at which it began waiting for bytes, and
// hbBusy once bytes arrived, until it waits again. Silence is then measured
// from the start of the wait, and a connection whose read goroutine is busy
// (a callback that takes long, bytes still to parse) is never taken for a
// silent one.

// hbBusy is heartbeat.seen while the read goroutine has bytes to dispatch.
const hbBusy = ^uint64(0)

// minWheelTick bounds the granularity of the wheels from below.
const minWheelTick = time.Millisecond

// hbWheel is the wheel of heartbeats of one tick length.
type hbWheel = wheel.Wheel[heartbeat, *heartbeat]

// heartbeat is a Conn's place in its wheel, allocated when its ReadLoop
// starts, if Options.PingInterval is set: 48 bytes, and a pointer in every
// Conn (which keeps a Conn without heartbeats in the size class it had).
type heartbeat struct {
	wheel.Entry[heartbeat]
	seen atomic.Uint64 // the tick the read goroutine began waiting at, or hbBusy
	c    *Conn

	// guarded by the wheel's lock (Check)
	pinged uint64 // the tick a ping went out at for this silence; 0: none
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

// hbWaiting records that the read goroutine is about to wait for bytes.
func (c *Conn) hbWaiting() {
	if hb := c.hb; hb != nil {
		hb.seen.Store(c.cfg.wheel.Now())
	}
}

// hbArrived records that bytes arrived: the peer is alive, and the read
// goroutine busy until it waits again.
func (c *Conn) hbArrived() {
	if hb := c.hb; hb != nil {
		hb.seen.Store(hbBusy)
	}
}

// Fire sends the connection a ping, which Check found due: on the wheel's
// goroutine, after the tick's checks.
func (hb *heartbeat) Fire() { hb.c.sendHeartbeatPing() }

// Check checks its connection at tick t, on the wheel's goroutine under its
// lock: it reports one silent for PingInterval as due a ping (fire), cuts
// one still silent PingTimeout after the ping, and returns the tick of the
// next check (a connection cut stays in the wheel until its ReadLoop ends).
// Nothing here or in the ping waits for a peer (sendHeartbeatPing), and a
// connection is cut on a goroutine of its own.
func (hb *heartbeat) Check(t uint64) (due uint64, fire bool) {
	c := hb.c
	interval, timeout := c.cfg.pingTicks, c.cfg.pingTimeoutTicks
	seen := hb.seen.Load()
	switch {
	case seen == hbBusy || c.closing.has(closeSent|netClosed):
		// Alive, or ending another way (CloseTimeout bounds the closing
		// handshake): look again later; finish takes c out.
		hb.pinged = 0
		return t + interval, false
	case hb.pinged != 0 && seen < hb.pinged:
		// Nothing arrived since the ping: the wait began before it.
		if t-hb.pinged >= timeout {
			err := fmt.Errorf("gust: no frame from the peer for %v (PingInterval %v + PingTimeout %v): %w",
				time.Duration(t-seen)*c.cfg.wheel.Tick(), c.cfg.PingInterval, c.cfg.PingTimeout, os.ErrDeadlineExceeded)
			// Closing a tls.Conn may write an alert, and wait for it:
			// not on the wheel's goroutine.
			go c.abort(err)
			return t + interval, false
		}
		return hb.pinged + timeout, false
	case t-seen > interval:
		// The wait began at tick seen or up to a tick later: a ping only
		// once the silence has surely lasted PingInterval.
		hb.pinged = t
		return t + timeout, true
	default:
		hb.pinged = 0
		return seen + interval + 1, false
	}
}

// sendHeartbeatPing sends c an empty ping from the wheel's goroutine, which
// must never wait for a peer. An idle connection, the usual one to ping,
// has its write lock free, nothing corked and room in its socket: the
// frame is written there and then, which costs one system call and no
// allocation. Otherwise the ping is queued in c's outbox, whose writer
// goroutine (or the read goroutine's flush) sends it.
func (c *Conn) sendHeartbeatPing() {
	if !c.tryPingNow() {
		c.queuePing()
	}
}

// tryPingNow writes an empty ping if that cannot wait, and reports whether
// it did. A frame the socket took only part of (it had room for less than
// the 2 or 6 bytes) stays corked, and the ping queued in the outbox behind
// it flushes it: the peer then gets a second ping, which is harmless.
func (c *Conn) tryPingNow() bool {
	w := &c.wr
	if !c.direct() || !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	if w.buf != nil || w.corked || c.writableLocked() != nil {
		return false
	}
	var f [2 + 4]byte
	var key [4]byte
	if !c.server {
		key = w.maskKey()
	}
	hn := putHeader(f[:], opPing, 0, !c.server, key)
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
	}
	return true
}

// queuePing queues an empty ping in c's outbox, whatever its size and
// policy: a connection has at most one heartbeat ping queued, since the
// next comes only after a frame arrived. The outbox's writer sends it, or
// corks it behind the read goroutine's writes; the outbox's lock is never
// held while writing, so this never waits for the peer. While a NextWriter
// is open, its next fragment takes the ping along as well: the outbox's
// writer may be waiting for that message to end, with data queued before
// the ping.
func (c *Conn) queuePing() {
	if c.wr.writerOpen.Load() {
		c.wr.pingDue.Store(true)
	}
	o := c.box()
	o.mu.Lock()
	if o.state != outboxOpen {
		o.mu.Unlock()
		return
	}
	o.pushLocked(outboxItem{op: opPing})
}
