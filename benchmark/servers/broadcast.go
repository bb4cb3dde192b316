package servers

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The broadcast servers (bcast-*) are echo servers like the others until BROADCAST_CONNS
// connections are open; then one goroutine publishes BROADCAST_SIZE-byte text messages (1 KiB
// by default, from a bcastFeed) to every connection, flat out, for as long as that many stay
// open. gustload
// -recv-only counts what arrives: deliveries per second, and with -pid the server's CPU seconds
// per million deliveries.
//
// "Flat out" needs flow control, or a publisher that outruns the sockets would grow every
// queue without end (gws) or have the outboxes close their connections as slow (gust): each
// publisher keeps at most about BROADCAST_WINDOW (16) messages per connection queued and not
// yet written, each the way its library allows: gust reads Hub.Stats().Pending; gws queues a
// marker behind every eighth broadcast on each connection's write queue (conn.Async); gorilla
// counts the messages its writer goroutines have not yet written. Publishing starts only once
// every connection is open, so that no socket buffer fills while gustload is still ramping up
// (its readers start when the last connection is open).
//
// BROADCAST_INTERVAL (a Go duration, such as 1s) turns flat out into the push load: one
// message to every open connection per interval, from the first connection on (set
// BROADCAST_CONNS=1), as examples/push does.

// bcastConfig is read from the environment when a broadcast server starts.
type bcastConfig struct {
	conns    int // connections that start the publisher; 0: never (a plain echo server)
	size     int
	window   int
	interval time.Duration // > 0: publish once per interval instead of flat out
}

func bcastConfigFromEnv() bcastConfig {
	c := bcastConfig{size: 1024, window: 16}
	if n, err := strconv.Atoi(os.Getenv("BROADCAST_CONNS")); err == nil && n > 0 {
		c.conns = n
	}
	if n, err := strconv.Atoi(os.Getenv("BROADCAST_SIZE")); err == nil && n >= 16 {
		c.size = n
	}
	if n, err := strconv.Atoi(os.Getenv("BROADCAST_WINDOW")); err == nil && n >= 2 {
		c.window = n
	}
	if d, err := time.ParseDuration(os.Getenv("BROADCAST_INTERVAL")); err == nil && d > 0 {
		c.interval = d
	}
	return c
}

// bcastFeed is what a publisher sends: 64 texts of size bytes, each a run of price ticks (the
// same keys, other values: a live feed's JSON), taken in turn, so that consecutive messages
// differ as a real feed's do and a compressor that keeps its context across them (per
// connection) has something to gain over one that compresses each alone (shared). Only the
// publisher goroutine calls next; the texts never change once made.
type bcastFeed struct {
	msgs [][]byte
	i    int
}

func newBcastFeed(size int) *bcastFeed {
	symbols := []string{"GUST", "GWS", "NBIO", "WSIO", "FLATE"}
	rng := rand.New(rand.NewPCG(7, uint64(size)))
	f := &bcastFeed{}
	seq := 12345
	for range 64 {
		b := []byte{'['}
		for len(b) < size {
			if len(b) > 1 {
				b = append(b, ',')
			}
			seq++
			bid := 10000 + rng.IntN(500)
			b = fmt.Appendf(b, `{"seq":%d,"symbol":%q,"bid":%d.%02d,"ask":%d.%02d,"venue":"loopback","ts":"2026-11-28T10:%02d:%02d.%03dZ"}`,
				seq, symbols[rng.IntN(len(symbols))], bid/100, bid%100, (bid+25)/100, (bid+25)%100, rng.IntN(60), rng.IntN(60), rng.IntN(1000))
		}
		f.msgs = append(f.msgs, b[:size])
	}
	return f
}

func (f *bcastFeed) next() []byte {
	m := f.msgs[f.i]
	f.i = (f.i + 1) % len(f.msgs)
	return m
}

// bcastTrigger starts run once the open connections reach conns, and tells it to stop when
// they fall below.
type bcastTrigger struct {
	cfg     bcastConfig
	open    atomic.Int64
	started atomic.Bool
	run     func(stop func() bool)
	ticker  *time.Ticker // interval mode; only the publisher goroutine touches it
}

func (t *bcastTrigger) opened() {
	n := t.open.Add(1)
	if t.cfg.conns > 0 && n >= int64(t.cfg.conns) && t.started.CompareAndSwap(false, true) {
		go t.run(func() bool { return t.open.Load() < int64(t.cfg.conns) })
	}
}

func (t *bcastTrigger) closed() { t.open.Add(-1) }

// pace waits until the publisher may start its next round: flat out, while pending() > limit
// (pending may be nil: no flow control); in interval mode, until the next tick (the first round
// starts at once). It returns false when the run is over.
func (t *bcastTrigger) pace(pending func() int64, limit int64, stop func() bool) bool {
	if t.cfg.interval > 0 {
		if t.ticker == nil {
			t.ticker = time.NewTicker(t.cfg.interval)
			return !stop()
		}
		<-t.ticker.C
		return !stop()
	}
	if pending == nil {
		return !stop()
	}
	return waitBelow(pending, limit, stop)
}

// waitBelow waits while pending() > limit, unless stop says the run is over. It yields to the
// writers first (with GOMAXPROCS=1, as the bench runs the server, they then run at once) and
// sleeps only when that does not help: a sleep lasts up to a millisecond here, long enough
// for the writers to run dry.
func waitBelow(pending func() int64, limit int64, stop func() bool) bool {
	for i := 0; pending() > limit; i++ {
		if stop() {
			return false
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return !stop()
}

// connSet is the set of open connections of a library, with a snapshot slice that is rebuilt
// only after a change.
type connSet[C comparable] struct {
	mu      sync.Mutex
	m       map[C]struct{}
	version atomic.Uint64
	snap    []C
	snapVer uint64
}

func (s *connSet[C]) add(c C) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[C]struct{})
	}
	s.m[c] = struct{}{}
	s.version.Add(1)
	s.mu.Unlock()
}

func (s *connSet[C]) remove(c C) {
	s.mu.Lock()
	delete(s.m, c)
	s.version.Add(1)
	s.mu.Unlock()
}

// list returns the current connections; only the publisher goroutine calls it.
func (s *connSet[C]) list() []C {
	if v := s.version.Load(); v != s.snapVer || s.snap == nil {
		s.mu.Lock()
		s.snap = s.snap[:0]
		for c := range s.m {
			s.snap = append(s.snap, c)
		}
		s.snapVer = s.version.Load()
		s.mu.Unlock()
	}
	return s.snap
}
