package gust

import (
	"context"
	"runtime"
	"time"
)

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
	p, ok := c.pings.Add(ch)
	if !ok {
		return 0, errClosed
	}
	start := time.Now()
	if err := c.wr.control(opPing, p[:]); err != nil {
		c.pings.Remove(p)
		return 0, err
	}
	select {
	case at, ok := <-ch:
		if !ok {
			return 0, errClosed
		}
		return at.Sub(start), nil
	case <-ctx.Done():
		c.pings.Remove(p)
		return 0, ctx.Err()
	}
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
