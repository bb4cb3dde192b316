// Package track keeps the connections a server made, so that its Shutdown,
// Drain and Close reach them: a slot in a slice per connection, no
// goroutine. It knows connections only through the operations of Ops,
// which the root package gives a zero-size type, so that the Conn type
// gains no method and no memory for it.
package track

import (
	"cmp"
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// closesPerSender is the fewest connections a shutdown gives each goroutine
// that sends its close frames.
const closesPerSender = 256

// goingAway is the code of Shutdown's close frames (1001, going away).
const goingAway = 1001

// Ops is what a Set does to its connections of type C. Its methods are
// called on O's zero value: O is a zero-size type, whose methods reach the
// connection.
type Ops[C any] interface {
	// Index returns where c keeps its index in the Set's slice, written
	// and read under the Set's lock.
	Index(c C) *int32

	// StartClose starts c's closing handshake with code and reason; it may
	// wait for c's write lock.
	StartClose(c C, code uint16, reason string)

	// CloseNoWait starts c's closing handshake without waiting on c; the
	// goroutines it starts for that are counted in wg, if not nil.
	CloseNoWait(c C, code uint16, reason string, wg *sync.WaitGroup)

	// RefuseWrites makes c's writes fail from now on, as they will once
	// its close frame is out.
	RefuseWrites(c C)

	// Cut closes c without a close handshake, and ends it if it had not
	// started.
	Cut(c C)
}

// Set keeps the connections a server made. Begin reserves a place before
// the handshake (refused once a shutdown has started); then Add tracks the
// connection, or End gives the place back when none was made; Forget drops
// a connection once it has ended (its OnClose has returned). Its zero value
// is empty, and its methods may be called concurrently.
type Set[C comparable, O Ops[C]] struct {
	closing  atomic.Bool // Shutdown or Close has started: Begin fails
	draining atomic.Bool // Drain has started: handshakes are refused

	mu     sync.Mutex
	cut    bool           // Close, or Shutdown's context ended: Add cuts the connection at once
	conns  []C            // each at its Index
	wg     sync.WaitGroup // one per place Begin reserved and End or Forget has not given back
	code   uint16         // the close frame Add sends a connection, with reason; 0: none
	reason string
	spread chan struct{} // made by Drain, closed once its closes are all sent or it stopped
	stop   chan struct{} // made by Drain, closed when a shutdown starts: the drain stops
	empty  chan struct{} // made by WaitEmpty, closed by Forget when conns empties
}

// Closing reports whether a shutdown or a Close has started.
func (t *Set[C, O]) Closing() bool { return t.closing.Load() }

// Draining reports whether a drain has started.
func (t *Set[C, O]) Draining() bool { return t.draining.Load() }

// Len returns the number of connections tracked.
func (t *Set[C, O]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// Begin reserves a place for a connection about to be made. It returns
// false once a shutdown has started.
func (t *Set[C, O]) Begin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing.Load() {
		return false
	}
	t.wg.Add(1) // under mu, after the check: it cannot race the Wait in Shutdown
	return true
}

// End gives back the place Begin reserved, when no connection was made.
func (t *Set[C, O]) End() { t.wg.Done() }

// Add tracks c, made after Begin. If a shutdown or a drain has started
// meanwhile, it sends c their close frame (1001, or the drain's code); if
// the connections are being cut, it ends c and returns false. Whatever c
// calls Forget with must be set before: c may end here.
func (t *Set[C, O]) Add(c C) bool {
	var o O
	t.mu.Lock()
	*o.Index(c) = int32(len(t.conns))
	t.conns = append(t.conns, c)
	cut, code, reason := t.cut, t.code, t.reason
	t.mu.Unlock()
	switch {
	case cut:
		o.Cut(c)
		return false
	case code != 0:
		o.StartClose(c, code, reason)
	}
	return true
}

// Forget drops c, whose OnClose has returned.
func (t *Set[C, O]) Forget(c C) {
	var o O
	t.mu.Lock()
	if i := int(*o.Index(c)); i < len(t.conns) && t.conns[i] == c {
		last := len(t.conns) - 1
		t.conns[i] = t.conns[last]
		*o.Index(t.conns[i]) = int32(i)
		var zero C
		t.conns[last] = zero
		t.conns = t.conns[:last]
		if cap(t.conns) > 256 && len(t.conns) < cap(t.conns)/4 {
			t.conns = append([]C(nil), t.conns...) // give back what a crowd that left used
		}
		if len(t.conns) == 0 && t.empty != nil {
			close(t.empty)
			t.empty = nil
		}
	}
	t.mu.Unlock()
	t.wg.Done()
}

// SentByShutdown reports whether code, which was sent a connection, is
// the close frame of a shutdown or a drain that has started.
func (t *Set[C, O]) SentByShutdown(code uint16) bool {
	if code == 0 {
		return false
	}
	if code == goingAway && t.closing.Load() {
		return true // Shutdown's, which may not have set t.code yet
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return code == t.code
}

func (t *Set[C, O]) snapshotLocked() []C {
	return append([]C(nil), t.conns...)
}

// StartClosing marks the start of a shutdown or a Close: Begin fails from
// now on, and a drain in progress stops spreading its closes.
func (t *Set[C, O]) StartClosing() {
	if t.closing.Swap(true) {
		return
	}
	t.mu.Lock() // after the Swap: a drain that checked closing under mu before it has made stop
	if t.stop != nil {
		close(t.stop)
	}
	t.mu.Unlock()
}

// ShutdownHook, if set (the root's export_test.go), is called by a
// shutdown with its Set once its connections refuse writes, before their
// close frames go out.
var ShutdownHook atomic.Pointer[func(set any)]

// DrainHook, if set (the root's export_test.go), is told each connection's
// close time, counted from the drain's start, before the first close.
var DrainHook atomic.Pointer[func(set, c any, at time.Duration)]

// Shutdown sends a close frame with code and reason to every connection
// that has not sent one (none for code 0: a drain's are on their way), and
// waits until they have ended or ctx is done; then it cuts the rest, waits
// for their OnClose, and returns ctx.Err().
//
// The close frames go out from as many goroutines as GOMAXPROCS, each
// writing its share without waiting on a peer (CloseNoWait): a goroutine
// each would put thousands of runnable goroutines ahead of the event
// loops, which read the answers, in the scheduler's queue.
func (t *Set[C, O]) Shutdown(ctx context.Context, code uint16, reason string) error {
	var o O
	t.StartClosing()
	var conns []C
	if code != 0 {
		t.mu.Lock()
		t.code, t.reason = code, reason
		conns = t.snapshotLocked()
		t.mu.Unlock()
	}
	// Every connection refuses writes from now on, as it will once its close
	// frame is out: the senders take a while to reach the last of many, and
	// what the first to leave make their handlers send the rest (a member
	// left: tell the room) is for connections that are going away too.
	for _, c := range conns {
		o.RefuseWrites(c)
	}
	if h := ShutdownHook.Load(); h != nil {
		(*h)(t)
	}
	var closers sync.WaitGroup
	senders := min(runtime.GOMAXPROCS(0), (len(conns)+closesPerSender-1)/closesPerSender)
	for i := range senders {
		closers.Go(func() {
			for j := i; j < len(conns); j += senders {
				o.CloseNoWait(conns[j], code, reason, &closers)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		t.cutAll()
		<-done
		err = ctx.Err()
	}
	closers.Wait() // each connection has ended: a close frame still waiting fails at once
	return err
}

// Close cuts every connection and waits for their OnClose.
func (t *Set[C, O]) Close() {
	t.cutAll()
	t.wg.Wait()
}

// cutAll cuts every connection, and those Add is given from now on.
func (t *Set[C, O]) cutAll() {
	var o O
	t.StartClosing()
	t.mu.Lock()
	t.cut = true
	conns := t.snapshotLocked()
	t.mu.Unlock()
	for _, c := range conns {
		o.Cut(c)
	}
}

// A drain, for rolling restarts: from its start, handshakes are refused
// while Draining tells a health route so; each connection open then gets
// its close frame at a time of its own, drawn uniformly over the window,
// so that its clients come back (to the other instances) spread over the
// window rather than all in the same instant. Drain's own goroutine sends
// the closes in time order, never waiting on a peer (CloseNoWait), and
// touches only the connections due at each wake; then the drain ends as a
// shutdown does.

// plannedClose is a connection and the time its drain closes it at.
type plannedClose[C any] struct {
	c  C
	at time.Duration // from the drain's start
}

// Drain sends every connection open at its start a close frame with code
// and reason, each at a time drawn uniformly in [0, window), and returns
// nil once all are sent or a shutdown has started (which takes over), or
// ctx.Err() if ctx ends first. A drain that finds another one started
// waits for that one's closes instead; one after a shutdown has nothing to
// do.
func (t *Set[C, O]) Drain(ctx context.Context, window time.Duration, code uint16, reason string) error {
	var o O
	t.mu.Lock()
	if spread := t.spread; spread != nil {
		t.mu.Unlock()
		select {
		case <-spread:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if t.closing.Load() {
		t.mu.Unlock()
		return nil
	}
	t.draining.Store(true)
	t.code, t.reason = code, reason // for a handshake that passed the check before it
	spread, stop := make(chan struct{}), make(chan struct{})
	t.spread, t.stop = spread, stop
	plan := make([]plannedClose[C], len(t.conns))
	for i, c := range t.conns {
		plan[i].c = c
	}
	t.mu.Unlock()
	defer close(spread)

	planCloses(plan, window)
	if h := DrainHook.Load(); h != nil {
		for _, p := range plan {
			(*h)(t, p.c, p.at)
		}
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var zero C
	for i := 0; i < len(plan); {
		now := time.Since(start)
		for ; i < len(plan) && plan[i].at <= now; i++ {
			o.CloseNoWait(plan[i].c, code, reason, nil)
			plan[i].c = zero // an ended connection is not kept for the window
		}
		if i == len(plan) {
			break
		}
		if timer == nil {
			timer = time.NewTimer(plan[i].at - now)
		} else {
			timer.Reset(plan[i].at - now)
		}
		select {
		case <-timer.C:
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WaitEmpty waits until no connection is left, a shutdown has started, or
// ctx is done; it returns ctx.Err() in the last case. Unlike the wait of a
// shutdown (wg), it lets a server go on accepting meanwhile.
func (t *Set[C, O]) WaitEmpty(ctx context.Context) error {
	t.mu.Lock()
	if len(t.conns) == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.empty == nil {
		t.empty = make(chan struct{})
	}
	empty, stop := t.empty, t.stop
	t.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// planCloses gives each connection of plan a time drawn uniformly at random
// in [0, window), and sorts plan by time.
func planCloses[C any](plan []plannedClose[C], window time.Duration) {
	if window <= 0 {
		return
	}
	for i := range plan {
		plan[i].at = rand.N(window)
	}
	slices.SortFunc(plan, func(a, b plannedClose[C]) int { return cmp.Compare(a.at, b.at) })
}
