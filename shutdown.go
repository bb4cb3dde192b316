package gust

import (
	"cmp"
	"context"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// closesPerSender is the fewest connections a shutdown gives each goroutine
// that sends its close frames.
const closesPerSender = 256

// goingAwayReason is the reason of the close frame a shutdown sends, and
// drainReason that of a drain's.
const (
	goingAwayReason = "server shutting down"
	drainReason     = "server draining"
)

// tracker keeps the connections an Upgrader made (a Server's too, through
// its Upgrader field), so that Shutdown, Drain and Close reach them: a slot in a
// slice per connection, no goroutine. begin reserves a place before the
// handshake (refused once a shutdown has started); then add tracks the Conn,
// or end gives the place back when none was made; forget drops a Conn once
// its OnClose has returned.
type tracker struct {
	closing  atomic.Bool // Shutdown or Close has started: begin fails
	draining atomic.Bool // Drain has started: handshakes are refused (drainRefusal)

	mu     sync.Mutex
	cut    bool           // Close, or Shutdown's context ended: add cuts the Conn at once
	conns  []*Conn        // each at its c.trackAt
	wg     sync.WaitGroup // one per place begin reserved and end or forget has not given back
	code   StatusCode     // the close frame add sends a Conn, with reason; 0: none
	reason string
	spread chan struct{} // made by Drain, closed once its closes are all sent or it stopped
	stop   chan struct{} // made by Drain, closed when a shutdown starts: the drain stops
	empty  chan struct{} // made by waitEmpty, closed by forget when conns empties
}

// begin reserves a place for a connection about to be made. It returns
// false once a shutdown has started.
func (t *tracker) begin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing.Load() {
		return false
	}
	t.wg.Add(1) // under mu, after the check: it cannot race the Wait in shutdown
	return true
}

// end gives back the place begin reserved, when no Conn was made.
func (t *tracker) end() { t.wg.Done() }

// add tracks c, made after begin. If a shutdown or a drain has started
// meanwhile, it sends c their close frame (1001, or the drain's code); if
// the connections are being cut, it ends c and returns false.
func (t *tracker) add(c *Conn) bool {
	t.mu.Lock()
	c.trackAt = int32(len(t.conns))
	t.conns = append(t.conns, c)
	c.tracker = t
	cut, code, reason := t.cut, t.code, t.reason
	t.mu.Unlock()
	switch {
	case cut:
		cutConn(c)
		return false
	case code != 0:
		c.startClose(code, reason)
	}
	return true
}

// forget drops c, whose OnClose has returned.
func (t *tracker) forget(c *Conn) {
	t.mu.Lock()
	if i := int(c.trackAt); i < len(t.conns) && t.conns[i] == c {
		last := len(t.conns) - 1
		t.conns[i] = t.conns[last]
		t.conns[i].trackAt = int32(i)
		t.conns[last] = nil
		t.conns = t.conns[:last]
		if cap(t.conns) > 256 && len(t.conns) < cap(t.conns)/4 {
			t.conns = append([]*Conn(nil), t.conns...) // give back what a crowd that left used
		}
		if len(t.conns) == 0 && t.empty != nil {
			close(t.empty)
			t.empty = nil
		}
	}
	t.mu.Unlock()
	t.wg.Done()
}

// sentByShutdown reports whether code, which gust sent a connection, is
// the close frame of a shutdown or a drain that has started.
func (t *tracker) sentByShutdown(code StatusCode) bool {
	if code == 0 {
		return false
	}
	if code == StatusGoingAway && t.closing.Load() {
		return true // Shutdown's, which may not have set t.code yet
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return code == t.code
}

func (t *tracker) snapshotLocked() []*Conn {
	return append([]*Conn(nil), t.conns...)
}

// startClosing marks the start of a shutdown or a Close: begin fails from
// now on, and a drain in progress stops spreading its closes.
func (t *tracker) startClosing() {
	if t.closing.Swap(true) {
		return
	}
	t.mu.Lock() // after the Swap: a drain that checked closing under mu before it has made stop
	if t.stop != nil {
		close(t.stop)
	}
	t.mu.Unlock()
}

// shutdown sends 1001 to every connection and waits (shutdownWith).
func (t *tracker) shutdown(ctx context.Context) error {
	return t.shutdownWith(ctx, StatusGoingAway, goingAwayReason)
}

// shutdownWith sends a close frame with code and reason to every connection
// that has not sent one (none for code 0: a drain's are on their way), and
// waits until they have ended or ctx is done; then it cuts the rest, waits
// for their OnClose, and returns ctx.Err().
//
// The close frames go out from as many goroutines as GOMAXPROCS, each
// writing its share without waiting on a peer (closeNoWait): a goroutine
// each would put thousands of runnable goroutines ahead of the event
// loops, which read the answers, in the scheduler's queue.
func (t *tracker) shutdownWith(ctx context.Context, code StatusCode, reason string) error {
	t.startClosing()
	var conns []*Conn
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
		c.closing.take(closeDue)
	}
	if h := shutdownHook.Load(); h != nil {
		(*h)(t)
	}
	var closers sync.WaitGroup
	senders := min(runtime.GOMAXPROCS(0), (len(conns)+closesPerSender-1)/closesPerSender)
	for i := range senders {
		closers.Go(func() {
			for j := i; j < len(conns); j += senders {
				conns[j].closeNoWait(code, reason, &closers)
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

// close cuts every connection and waits for their OnClose.
func (t *tracker) close() {
	t.cutAll()
	t.wg.Wait()
}

// cutAll cuts every connection, and those add is given from now on.
func (t *tracker) cutAll() {
	t.startClosing()
	t.mu.Lock()
	t.cut = true
	conns := t.snapshotLocked()
	t.mu.Unlock()
	for _, c := range conns {
		cutConn(c)
	}
}

// A drain, for rolling restarts: from its start, handshakes are refused
// (drainRefusal) while Draining tells a health route so; each connection
// open then gets its close frame at a time of its own, drawn uniformly over
// the window, so that its clients come back (to the other instances)
// spread over the window rather than all in the same instant. Drain's own
// goroutine sends the closes in time order, never waiting on a peer
// (closeNoWait), and touches only the connections due at each wake; then
// the drain ends as a shutdown does.

// shutdownHook, if set (export_test.go), is called by a shutdown once its
// connections refuse writes, before their close frames go out.
var shutdownHook atomic.Pointer[func(t *tracker)]

// drainHook, if set (export_test.go), is told each connection's close time,
// counted from the drain's start, before the first close.
var drainHook atomic.Pointer[func(t *tracker, c *Conn, at time.Duration)]

// plannedClose is a connection and the time its drain closes it at.
type plannedClose struct {
	c  *Conn
	at time.Duration // from the drain's start
}

// drainCode returns the close code a drain asked for code sends:
// StatusServiceRestart for 0, ErrInvalidCloseCode for a code no close
// frame may carry.
func drainCode(code StatusCode) (StatusCode, error) {
	if code == 0 {
		return StatusServiceRestart, nil
	}
	if !code.validOnWire() {
		return 0, ErrInvalidCloseCode
	}
	return code, nil
}

// drainRefusal is the answer to a handshake during a drain: 503, with
// Retry-After: 1 (a client that waits for it, through a balancer told by
// the health route, reaches another instance) and Connection: close.
func drainRefusal() *HandshakeError {
	herr := refusal(http.StatusServiceUnavailable, drainReason)
	herr.Header = http.Header{"Retry-After": {"1"}}
	herr.Err = ErrServerClosed
	return herr
}

// refuseDraining answers a handshake that came to an Upgrader during a
// drain, through net/http.
func refuseDraining(w http.ResponseWriter) *HandshakeError {
	herr := drainRefusal()
	w.Header().Set("Connection", "close")
	w.Header().Set("Retry-After", herr.Header.Get("Retry-After"))
	http.Error(w, drainReason, herr.Status)
	return herr
}

// refuseShuttingDown answers a handshake that came through net/http once a
// shutdown has started: 503 and Connection: close.
func refuseShuttingDown(w http.ResponseWriter) *HandshakeError {
	w.Header().Set("Connection", "close")
	http.Error(w, goingAwayReason, http.StatusServiceUnavailable)
	herr := refusal(http.StatusServiceUnavailable, goingAwayReason)
	herr.Err = ErrServerClosed
	return herr
}

// drain sends every connection open at its start a close frame with code,
// each at a time drawn uniformly in [0, window), and returns nil once all
// are sent or a shutdown has started (which takes over), or ctx.Err() if
// ctx ends first. A drain that finds another one started waits for that
// one's closes instead; one after a shutdown has nothing to do.
func (t *tracker) drain(ctx context.Context, window time.Duration, code StatusCode) error {
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
	t.code, t.reason = code, drainReason // for a handshake that passed the check before it
	spread, stop := make(chan struct{}), make(chan struct{})
	t.spread, t.stop = spread, stop
	plan := make([]plannedClose, len(t.conns))
	for i, c := range t.conns {
		plan[i].c = c
	}
	t.mu.Unlock()
	defer close(spread)

	planCloses(plan, window)
	if h := drainHook.Load(); h != nil {
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
	for i := 0; i < len(plan); {
		now := time.Since(start)
		for ; i < len(plan) && plan[i].at <= now; i++ {
			plan[i].c.closeNoWait(code, drainReason, nil)
			plan[i].c = nil // an ended Conn is not kept for the window
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

// waitEmpty waits until no connection is left, a shutdown has started, or
// ctx is done; it returns ctx.Err() in the last case. Unlike the wait of a
// shutdown (wg), it lets a Server go on accepting meanwhile.
func (t *tracker) waitEmpty(ctx context.Context) error {
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
func planCloses(plan []plannedClose, window time.Duration) {
	if window <= 0 {
		return
	}
	for i := range plan {
		plan[i].at = rand.N(window)
	}
	slices.SortFunc(plan, func(a, b plannedClose) int { return cmp.Compare(a.at, b.at) })
}

// closeNoWait starts c's closing handshake with code and reason, as
// startClose does, from a goroutine that must not wait on c (a drain's, a
// shutdown's). When c's write lock is free, the close frame is written at
// once, what the socket does not take kept in the backlog, which a
// short-lived goroutine then writes (the outbox's writer does the same);
// else, or when c's transport cannot try a write (TLS in goroutine mode,
// HTTP/2), a short-lived goroutine sends it. Those goroutines are counted
// in wg, if not nil.
func (c *Conn) closeNoWait(code StatusCode, reason string, wg *sync.WaitGroup) {
	if c.closing.has(closeSent | netClosed) {
		return
	}
	spawn := func(f func()) {
		if wg != nil {
			wg.Go(f)
		} else {
			go f()
		}
	}
	w := &c.wr
	if !c.direct() || !w.mu.TryLock() {
		spawn(func() { c.startClose(code, reason) })
		return
	}
	loop := w.noWait // an event loop dispatches: it writes the backlog
	w.noWait = true
	err := c.wr.closeFrameLocked(code, reason)
	w.noWait = loop
	backlog := w.backlog != nil && !loop
	w.mu.Unlock()
	if err != nil {
		return
	}
	c.setReadDeadline(time.Now().Add(c.cfg.CloseTimeout))
	if backlog {
		spawn(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !w.noWait {
				w.failed(w.backlogLocked())
			}
		})
	}
}

// cutConn closes c without a close handshake; OnClose receives
// ErrServerClosed. A Conn whose ReadLoop has not started is ended here,
// OnClose included, and its ReadLoop will return at once.
func cutConn(c *Conn) {
	c.abort(ErrServerClosed)
	if c.started.CompareAndSwap(false, true) {
		c.opened()
		c.finish(ErrServerClosed)
	}
}

// Shutdown sends a close frame with 1001 (going away) to every connection
// the Upgrader made and waits until they have ended (their OnClose
// returned) or ctx is done; then it cuts the rest (OnClose receives
// ErrServerClosed), waits for their OnClose, and returns ctx.Err(). A peer
// that does not read delays no one: Shutdown returns by ctx's deadline.
// From its start, writes to those connections fail with net.ErrClosed, as
// they would after their close frame (which may take the senders a while
// to reach among many), and messages still in their outboxes are dropped.
// Meanwhile and afterwards, Upgrade refuses requests with 503 and an error
// wrapping ErrServerClosed. A Conn whose ReadLoop has not started gets the
// close frame too; if cut, its OnClose runs in Shutdown's goroutine.
//
// net/http's Server.Shutdown does not cover hijacked connections: on
// SIGTERM call the http.Server's first (it stops accepting), then the
// Upgrader's, with one ctx. README's "Two ways to accept" shows how, also with
// [http.Server.RegisterOnShutdown].
func (u *Upgrader) Shutdown(ctx context.Context) error {
	return u.track.shutdown(ctx)
}

// Drain closes the Upgrader's connections over window, for a rolling
// restart, then shuts it down as Shutdown does. From its call, Upgrade
// refuses handshakes with 503 Service Unavailable, Retry-After: 1 and
// Connection: close (returning a *HandshakeError wrapping ErrServerClosed)
// and Draining reports true, for a health route to tell the load balancer.
// Each connection open then gets a close frame with code at a time of its
// own, drawn uniformly at random over window, so that its clients, which
// reconnect at once, reach the other instances spread over the window
// rather than all in the same instant. Code 0 means StatusServiceRestart
// (1012: come back, elsewhere or a little later); a code no close frame may
// carry returns ErrInvalidCloseCode and drains nothing. A window of 0 sends
// every close at once.
//
// Drain then waits until the connections have ended or ctx is done, as
// Shutdown does. If ctx ends first, during the window or after, Drain cuts
// every connection left, those not closed yet included (OnClose receives
// ErrServerClosed), and returns ctx.Err(): give ctx the window plus
// Options.CloseTimeout. A Shutdown or Close called meanwhile takes over at
// once (1001 to the connections not closed yet, or the cut); a second
// Drain keeps the first one's times and code, and waits as it does.
//
// The window and the code are arguments rather than an options struct:
// they are the whole of a drain, each with a useful zero. Drain's own
// goroutine sends the closes in time order, each without waiting for its
// peer (a connection whose write lock is held gets its close from a
// short-lived goroutine): no goroutine or timer per connection, and no
// burst of closes on an event loop.
func (u *Upgrader) Drain(ctx context.Context, window time.Duration, code StatusCode) error {
	code, err := drainCode(code)
	if err != nil {
		return err
	}
	err = u.track.drain(ctx, window, code)
	if err == nil {
		err = u.track.waitEmpty(ctx)
	}
	if err != nil {
		u.track.close()
		return err
	}
	return u.track.shutdownWith(ctx, 0, "") // the closes are sent: nothing left to wait for but handshakes
}

// Draining reports whether the Upgrader refuses new connections: Drain,
// Shutdown or Close has started. A health route answers 503 when it does,
// so that the load balancer sends new clients elsewhere.
func (u *Upgrader) Draining() bool {
	return u.track.draining.Load() || u.track.closing.Load()
}

// Close cuts every connection the Upgrader made, without a close handshake
// (OnClose receives ErrServerClosed), and waits for their OnClose calls.
// Afterwards Upgrade refuses requests with 503, as after Shutdown.
func (u *Upgrader) Close() error {
	u.track.close()
	return nil
}
