package gust

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/track"
)

// What the tests reach inside the package, on every system; the Linux-only
// hooks are in export_linux_test.go.

// runningWheels counts the heartbeat wheels' goroutines in the process.
func runningWheels() int32 {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var n int32
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "wheel.(*Wheel[...]).run(") {
			n++
		}
	}
	return n
}

// drainHooks holds the functions hookDrain set, by tracker, so that tests
// that drain may run in parallel.
var drainHooks struct {
	once sync.Once
	mu   sync.Mutex
	m    map[*tracker]func(c *Conn, at time.Duration)
}

// hookDrain has f called with each connection a drain of u's is about to
// close and its time, counted from the drain's start, before the first
// close, until the test ends.
func hookDrain(t testing.TB, u *Upgrader, f func(c *Conn, at time.Duration)) {
	h := &drainHooks
	h.once.Do(func() {
		h.m = make(map[*tracker]func(*Conn, time.Duration))
		hook := func(tr, c any, at time.Duration) {
			h.mu.Lock()
			f := h.m[tr.(*tracker)]
			h.mu.Unlock()
			if f != nil {
				f(c.(*Conn), at)
			}
		}
		track.DrainHook.Store(&hook)
	})
	h.mu.Lock()
	h.m[&u.track] = f
	h.mu.Unlock()
	t.Cleanup(func() {
		h.mu.Lock()
		delete(h.m, &u.track)
		h.mu.Unlock()
	})
}

// hookShutdown has f called when a Shutdown of u's has made its
// connections refuse writes, before it sends their close frames, until the
// test ends.
func hookShutdown(t testing.TB, u *Upgrader, f func()) {
	hook := func(tr any) {
		if tr == &u.track {
			f()
		}
	}
	old := track.ShutdownHook.Swap(&hook)
	t.Cleanup(func() { track.ShutdownHook.Store(old) })
}
