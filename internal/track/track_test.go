package track

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/internal/track"))
}

// conn stands for a connection: it records what the set did to it, and
// ends (Forget) when closed or cut, as a peer that answers at once would.
type conn struct {
	at  int32
	set *set

	mu      sync.Mutex
	code    uint16 // of the close frame it was sent; 0: none
	reason  string
	refused bool // RefuseWrites was called
	cut     bool
}

type set = Set[*conn, ops]

type ops struct{}

func (ops) Index(c *conn) *int32 { return &c.at }

func (ops) StartClose(c *conn, code uint16, reason string) { c.close(code, reason) }

func (ops) CloseNoWait(c *conn, code uint16, reason string, wg *sync.WaitGroup) {
	c.close(code, reason)
}

func (ops) RefuseWrites(c *conn) {
	c.mu.Lock()
	c.refused = true
	c.mu.Unlock()
}

func (ops) Cut(c *conn) {
	c.mu.Lock()
	c.cut = true
	c.mu.Unlock()
	go c.set.Forget(c)
}

func (c *conn) close(code uint16, reason string) {
	c.mu.Lock()
	c.code, c.reason = code, reason
	c.mu.Unlock()
	go c.set.Forget(c)
}

// added returns a conn begun and added to s.
func added(t *testing.T, s *set) *conn {
	c := &conn{set: s}
	require.True(t, s.Begin())
	require.True(t, s.Add(c))
	return c
}

// TestSetKeepsEveryConnUntilForgotten: the slice holds each connection
// once, at its index, whatever order they leave in, and gives back the
// room a crowd that left used.
func TestSetKeepsEveryConnUntilForgotten(t *testing.T) {
	t.Parallel()
	var s set
	conns := make([]*conn, 1000)
	for i := range conns {
		conns[i] = added(t, &s)
	}
	want := map[*conn]bool{}
	for _, c := range conns {
		want[c] = true
	}
	check := func() {
		s.mu.Lock()
		got := s.snapshotLocked()
		for i, c := range s.conns {
			require.Equal(t, int32(i), c.at)
		}
		s.mu.Unlock()
		require.Len(t, got, len(want))
		require.Equal(t, len(want), s.Len())
		for _, c := range got {
			require.True(t, want[c])
		}
	}
	check()
	// Leave from the middle, the front and the back, and twice.
	for _, i := range []int{500, 0, 999, 1, 998, 250, 750} {
		s.Forget(conns[i])
		delete(want, conns[i])
		check()
	}
	for i := 2; i < 990; i++ {
		if want[conns[i]] {
			s.Forget(conns[i])
			delete(want, conns[i])
		}
	}
	check()
	s.mu.Lock()
	require.Less(t, cap(s.conns), 1000/2, "the slice shrinks once most have left")
	s.mu.Unlock()
	for c := range want {
		s.Forget(c)
	}
	s.wg.Wait() // every place Begin reserved was given back
	require.Empty(t, s.conns)
}

// TestBeginFailsOnceClosing: once a shutdown or a Close has started, no
// place is reserved; a place reserved before is still given back by End.
func TestBeginFailsOnceClosing(t *testing.T) {
	t.Parallel()
	var s set
	require.False(t, s.Closing())
	require.True(t, s.Begin())
	s.StartClosing()
	require.True(t, s.Closing())
	require.False(t, s.Begin())
	s.End()
	s.Close() // nothing left to wait for

	var closed set
	closed.Close()
	require.False(t, closed.Begin())
	require.False(t, closed.Draining())
}

// TestAddDuringShutdown: a connection added once a shutdown has set its
// close frame gets that frame; one added once the connections are cut is
// cut, and Add says so.
func TestAddDuringShutdown(t *testing.T) {
	var s set
	require.True(t, s.Begin())
	late := &conn{set: &s}
	hook := func(tr any) {
		if tr == &s {
			require.True(t, s.Add(late))
		}
	}
	ShutdownHook.Store(&hook)
	t.Cleanup(func() { ShutdownHook.Store(nil) })
	early := added(t, &s)

	require.NoError(t, s.Shutdown(context.Background(), goingAway, "bye"))
	for _, c := range []*conn{early, late} {
		c.mu.Lock()
		require.Equal(t, uint16(goingAway), c.code)
		require.Equal(t, "bye", c.reason)
		c.mu.Unlock()
	}
	early.mu.Lock()
	require.True(t, early.refused, "writes refused before the close frame")
	early.mu.Unlock()
	require.True(t, s.SentByShutdown(goingAway))
	require.False(t, s.SentByShutdown(0))
	require.False(t, s.SentByShutdown(1000))

	var cut set
	require.True(t, cut.Begin())
	closed := make(chan struct{})
	go func() {
		cut.Close() // waits for the place reserved
		close(closed)
	}()
	require.Eventually(t, func() bool {
		cut.mu.Lock()
		defer cut.mu.Unlock()
		return cut.cut
	}, 5*time.Second, time.Millisecond)
	c := &conn{set: &cut}
	require.False(t, cut.Add(c))
	<-closed
	c.mu.Lock()
	require.True(t, c.cut)
	c.mu.Unlock()
}

// TestWaitEmpty: WaitEmpty returns at once when no connection is left,
// once the last is forgotten, when a shutdown stops a drain, and with
// ctx.Err() when ctx ends first.
func TestWaitEmpty(t *testing.T) {
	t.Parallel()
	var s set
	require.NoError(t, s.WaitEmpty(context.Background()))

	c := &conn{set: &s}
	require.True(t, s.Begin())
	require.True(t, s.Add(c))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.WaitEmpty(ctx), context.DeadlineExceeded)

	done := make(chan error, 1)
	go func() { done <- s.WaitEmpty(context.Background()) }()
	time.Sleep(10 * time.Millisecond) // let it wait, most often
	s.Forget(c)
	require.NoError(t, <-done)

	// A drain with a long window, stopped by a shutdown.
	var d set
	added(t, &d)
	drained := make(chan error, 1)
	go func() { drained <- d.Drain(context.Background(), time.Hour, 1012, "draining") }()
	require.Eventually(t, d.Draining, 5*time.Second, time.Millisecond)
	go func() { done <- d.WaitEmpty(context.Background()) }()
	d.StartClosing()
	require.NoError(t, <-done)
	require.NoError(t, <-drained)
	d.Close()
}

// TestPlanClosesIsUniform: the times a drain draws are sorted, within the
// window, and spread evenly over it (each tenth of the window holds a
// tenth of them, within 6.5 standard deviations).
func TestPlanClosesIsUniform(t *testing.T) {
	t.Parallel()
	const n, window = 10000, 10 * time.Second
	plan := make([]plannedClose[*conn], n)
	for i := range plan {
		plan[i].c = &conn{}
	}
	planCloses(plan, window)
	var buckets [10]int
	for i, p := range plan {
		require.NotNil(t, p.c)
		require.GreaterOrEqual(t, p.at, time.Duration(0))
		require.Less(t, p.at, window)
		if i > 0 {
			require.GreaterOrEqual(t, p.at, plan[i-1].at, "in time order")
		}
		buckets[p.at*10/window]++
	}
	for i, b := range buckets {
		require.InDelta(t, n/10, b, 200, "tenth %d of the window holds %d of %d: %v", i, b, n, buckets)
	}
	none := make([]plannedClose[*conn], 3)
	planCloses(none, 0)
	require.Equal(t, make([]plannedClose[*conn], 3), none, "no window: all at once")
}
