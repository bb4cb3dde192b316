package gust

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
)

// Heartbeats (Options.PingInterval) run on timing wheels that every
// connection of the process shares, not on a goroutine or a timer per
// connection. A wheel counts ticks of a fixed length and holds its
// connections in wheelSlots lists, each connection in the slot of the tick
// at which it is next due; each tick, the wheel's goroutine looks at the
// connections of one slot only, and moves each to the slot of its next
// check. A connection that keeps receiving is looked at about once per
// PingInterval; the goroutine runs only while the wheel has connections.
//
// The read goroutine tells the wheel what it does with two atomic stores
// per read, no lock: the tick at which it began waiting for bytes, and
// hbBusy once bytes arrived, until it waits again. Silence is then measured
// from the start of the wait, and a connection whose read goroutine is busy
// (a callback that takes long, bytes still to parse) is never taken for a
// silent one.

// wheelSlots is the number of slots in a wheel. A connection due more than
// wheelSlots ticks ahead is skipped when its slot comes round early.
const wheelSlots = 64

// hbBusy is heartbeat.seen while the read goroutine has bytes to dispatch.
const hbBusy = ^uint64(0)

// minWheelTick bounds the granularity of the wheels from below.
const minWheelTick = time.Millisecond

// heartbeat is a Conn's place in its wheel, allocated when its ReadLoop
// starts, if Options.PingInterval is set: 48 bytes, and a pointer in every
// Conn (which keeps a Conn without heartbeats in the size class it had).
type heartbeat struct {
	seen atomic.Uint64 // the tick the read goroutine began waiting at, or hbBusy
	c    *Conn

	// guarded by the wheel's mu
	prev, next *heartbeat // in the slot of due
	due        uint64     // the tick of the next check
	pinged     uint64     // the tick a ping went out at for this silence; 0: none
}

// wheel is a timing wheel shared by the connections whose heartbeats have
// the same tick. Its goroutine runs while it holds connections.
type wheel struct {
	tick time.Duration
	now  atomic.Uint64 // ticks counted, from 1; read by the read goroutines

	mu    sync.Mutex
	slots [wheelSlots]*heartbeat // heads of doubly linked lists through prev and next
	conns int
	quit  chan struct{} // closed to stop the goroutine; nil when none runs

	// ping collects the connections a tick finds silent, under mu; the
	// wheel's goroutine lends it its own list for the tick and takes it
	// back before it unlocks.
	ping []*Conn
}

// wheels holds a wheel per tick length in use, for the life of the process
// (a wheel without connections holds no goroutine and under 600 bytes), so
// that every connection with the same heartbeat settings shares one
// goroutine, whichever Upgrader, Server or Dial made it.
var wheels struct {
	mu sync.Mutex
	m  map[time.Duration]*wheel
}

// wheelTick is the tick of the wheel for interval and timeout: a quarter of
// the shorter, so that a check comes at most a quarter late.
func wheelTick(interval, timeout time.Duration) time.Duration {
	return max(min(interval, timeout)/4, minWheelTick)
}

// wheelFor returns the wheel of the given tick, made on first use.
func wheelFor(tick time.Duration) *wheel {
	wheels.mu.Lock()
	defer wheels.mu.Unlock()
	w := wheels.m[tick]
	if w == nil {
		if wheels.m == nil {
			wheels.m = make(map[time.Duration]*wheel)
		}
		w = &wheel{tick: tick}
		w.now.Store(1) // 0 means no ping in heartbeat.pinged
		wheels.m[tick] = w
	}
	return w
}

// ticks returns d in ticks of length tick, rounded up.
func ticks(d, tick time.Duration) uint64 {
	return uint64((d + tick - 1) / tick)
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
	w.mu.Lock()
	hb.due = w.now.Load() + c.cfg.pingTicks
	w.insertLocked(hb)
	w.conns++
	if w.quit == nil {
		w.quit = make(chan struct{})
		go w.run(w.quit)
	}
	w.mu.Unlock()
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
	w := c.cfg.wheel
	w.mu.Lock()
	w.removeLocked(hb)
	w.conns--
	if w.conns == 0 {
		close(w.quit)
		w.quit = nil
	}
	w.mu.Unlock()
}

// hbWaiting records that the read goroutine is about to wait for bytes.
func (c *Conn) hbWaiting() {
	if hb := c.hb; hb != nil {
		hb.seen.Store(c.cfg.wheel.now.Load())
	}
}

// hbArrived records that bytes arrived: the peer is alive, and the read
// goroutine busy until it waits again.
func (c *Conn) hbArrived() {
	if hb := c.hb; hb != nil {
		hb.seen.Store(hbBusy)
	}
}

// run is the wheel's goroutine: it advances the wheel each tick until quit
// is closed.
func (w *wheel) run(quit chan struct{}) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	var ping []*Conn // the connections a tick found silent, pinged once w.mu is released
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		w.mu.Lock()
		if w.quit != quit {
			// Stopped, and maybe started again, while this tick waited
			// for the lock: the new goroutine counts the ticks.
			w.mu.Unlock()
			return
		}
		// The list is this goroutine's own: a goroutine started after this
		// one stops must not share it while this one still sends.
		w.ping = ping
		w.advanceLocked()
		ping, w.ping = w.ping, nil
		w.mu.Unlock()
		for i, c := range ping {
			c.sendHeartbeatPing()
			ping[i] = nil
		}
		ping = ping[:0]
	}
}

// advanceLocked counts a tick and checks the connections due at it, and
// lists those to ping in w.ping. Nothing here or in the pings waits for a
// peer (sendHeartbeatPing), and a connection is cut on a goroutine of its
// own.
func (w *wheel) advanceLocked() {
	t := w.now.Add(1)
	slot := &w.slots[t%wheelSlots]
	for hb := *slot; hb != nil; {
		next := hb.next
		if hb.due <= t {
			w.removeLocked(hb)
			if hb.checkLocked(t) {
				w.ping = append(w.ping, hb.c)
			}
			w.insertLocked(hb)
		}
		hb = next
	}
}

// checkLocked checks its connection at tick t: it reports one silent for
// PingInterval as due a ping, cuts one still silent PingTimeout after the
// ping, and schedules the next check (a connection cut stays in the wheel
// until its ReadLoop ends).
func (hb *heartbeat) checkLocked(t uint64) (ping bool) {
	c := hb.c
	interval, timeout := c.cfg.pingTicks, c.cfg.pingTimeoutTicks
	seen := hb.seen.Load()
	switch {
	case seen == hbBusy || c.closing.Load() || c.netDone.Load():
		// Alive, or ending another way (CloseTimeout bounds the closing
		// handshake): look again later; finish takes c out.
		hb.pinged = 0
		hb.due = t + interval
	case hb.pinged != 0 && seen < hb.pinged:
		// Nothing arrived since the ping: the wait began before it.
		if t-hb.pinged >= timeout {
			err := fmt.Errorf("gust: no frame from the peer for %v (PingInterval %v + PingTimeout %v): %w",
				time.Duration(t-seen)*c.cfg.wheel.tick, c.cfg.PingInterval, c.cfg.PingTimeout, os.ErrDeadlineExceeded)
			// Closing a tls.Conn may write an alert, and wait for it:
			// not on the wheel's goroutine.
			go c.abort(err)
			hb.due = t + interval
			return false
		}
		hb.due = hb.pinged + timeout
	case t-seen > interval:
		// The wait began at tick seen or up to a tick later: a ping only
		// once the silence has surely lasted PingInterval.
		hb.pinged = t
		hb.due = t + timeout
		return true
	default:
		hb.pinged = 0
		hb.due = seen + interval + 1
	}
	return false
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
	if !c.rawWrites() || !w.mu.TryLock() {
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
	n, err := c.tryWriteRaw(f[:hn])
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
	o := c.wr.box()
	o.mu.Lock()
	if o.state != outboxOpen {
		o.mu.Unlock()
		return
	}
	c.pushLocked(outboxItem{op: opPing})
}

func (w *wheel) insertLocked(hb *heartbeat) {
	head := &w.slots[hb.due%wheelSlots]
	hb.prev, hb.next = nil, *head
	if *head != nil {
		(*head).prev = hb
	}
	*head = hb
}

func (w *wheel) removeLocked(hb *heartbeat) {
	if hb.prev != nil {
		hb.prev.next = hb.next
	} else {
		w.slots[hb.due%wheelSlots] = hb.next
	}
	if hb.next != nil {
		hb.next.prev = hb.prev
	}
	hb.prev, hb.next = nil, nil
}
