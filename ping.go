package gust

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pingPayloadSize is the size of the payload of a ping sent by Ping: a
// counter that tells its pong from the others.
const pingPayloadSize = 8

// pingSet holds the Pings waiting for their pongs; nil until the first
// Ping, so that a connection that never pings pays 8 bytes for it.
type pingSet struct{ p atomic.Pointer[pingWaiters] }

// pingsEnded is the set of a connection that ended before any Ping.
var pingsEnded = &pingWaiters{ended: true}

func (ps *pingSet) add(ch chan<- time.Time) (uint64, bool) {
	pw := ps.p.Load()
	if pw == nil {
		ps.p.CompareAndSwap(nil, new(pingWaiters))
		pw = ps.p.Load()
	}
	return pw.add(ch)
}

func (ps *pingSet) remove(id uint64) {
	if pw := ps.p.Load(); pw != nil {
		pw.remove(id)
	}
}

func (ps *pingSet) pong(p []byte) {
	if pw := ps.p.Load(); pw != nil {
		pw.pong(p)
	}
}

func (ps *pingSet) end() {
	if !ps.p.CompareAndSwap(nil, pingsEnded) {
		ps.p.Load().end()
	}
}

// pingWaiters is a pingSet once a Ping has come.
type pingWaiters struct {
	mu    sync.Mutex
	next  uint64                      // the payload of the next ping
	wait  map[uint64]chan<- time.Time // by payload; each channel has room for one value
	ended bool                        // the connection has ended: no more waiters
}

// Ping sends a ping, waits for the pong that answers it and returns the
// round-trip time. Its payload is an 8-byte counter, so several Pings may
// wait at once, from any goroutines, each for its own pong; every pong
// still reaches OnPong. Ping returns ctx's error when ctx ends first (give
// it a deadline: a peer may never answer), and net.ErrClosed when the
// connection ends. From a goroutine that runs a connection's callbacks
// (unless in OnMessage with Options.Parallel set) it could never see its
// pong, and returns an error at once without sending: call it from another
// goroutine, or use WritePing and OnPong. Cost: a channel and a map entry
// per Ping, and a walk of its goroutine's stack (about a microsecond).
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.conn == nil {
		return 0, c.closedErr()
	}
	if onReadPath() {
		return 0, errPingOnReader
	}
	ch := make(chan time.Time, 1)
	id, ok := c.pings.add(ch)
	if !ok {
		return 0, errClosed
	}
	var p [pingPayloadSize]byte
	binary.BigEndian.PutUint64(p[:], id)
	start := time.Now()
	if err := c.wr.control(opPing, p[:]); err != nil {
		c.pings.remove(id)
		return 0, err
	}
	select {
	case at, ok := <-ch:
		if !ok {
			return 0, errClosed
		}
		return at.Sub(start), nil
	case <-ctx.Done():
		c.pings.remove(id)
		return 0, ctx.Err()
	}
}

// add registers ch and returns the payload of its ping; ok is false once
// the connection has ended.
func (pw *pingWaiters) add(ch chan<- time.Time) (id uint64, ok bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.ended {
		return 0, false
	}
	if pw.wait == nil {
		pw.wait = make(map[uint64]chan<- time.Time)
		pw.next = rand.Uint64() // so that unsolicited pongs are unlikely to match
	}
	id = pw.next
	pw.next++
	pw.wait[id] = ch
	return id, true
}

func (pw *pingWaiters) remove(id uint64) {
	pw.mu.Lock()
	delete(pw.wait, id)
	pw.mu.Unlock()
}

// pong hands the time a pong with payload p arrived to the Ping waiting
// for it, if any; the read goroutine calls it for every pong.
func (pw *pingWaiters) pong(p []byte) {
	if len(p) != pingPayloadSize {
		return
	}
	id := binary.BigEndian.Uint64(p)
	pw.mu.Lock()
	if ch, ok := pw.wait[id]; ok {
		delete(pw.wait, id)
		ch <- time.Now() // never blocks: room for one, and one send per channel
	}
	pw.mu.Unlock()
}

// end wakes every waiting Ping with a closed channel, and makes later Pings
// fail at once; the connection calls it when it ends.
func (pw *pingWaiters) end() {
	pw.mu.Lock()
	pw.ended = true
	for _, ch := range pw.wait {
		close(ch)
	}
	pw.wait = nil
	pw.mu.Unlock()
}

// serveFunc is the function on the stack of every goroutine that reads a
// connection and runs its callbacks (ReadLoop's, an event loop's, a resumed
// connection's); Options.Parallel's OnMessage calls run elsewhere.
const serveFunc = "github.com/gustws/gust.(*Conn).serve"

// onReadPath reports whether serveFunc is on the caller's stack, within
// the frames looked at.
func onReadPath() bool {
	var pcs [128]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == serveFunc {
			return true
		}
		if !more {
			return false
		}
	}
}
