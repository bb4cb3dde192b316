package gust

import (
	"context"
	"sync"
	"sync/atomic"
)

// goingAwayReason is the reason of the close frame a shutdown sends.
const goingAwayReason = "server shutting down"

// tracker keeps the connections an Upgrader made, so that Shutdown and
// Close can reach them; a Server uses its Upgrader field's tracker for
// its own connections too. A connection costs a slot in a slice (8 bytes)
// and its index in the Conn, an append when it is made and a swap with the
// last when it ends, and no goroutine.
//
// The life of a connection in the tracker: begin reserves its place before
// the handshake (and fails once a shutdown has started), then add hands the
// Conn over, or end gives the place back when no Conn was made. A tracked
// Conn leaves when its OnClose has returned (forget, called by finish).
type tracker struct {
	closing atomic.Bool // Shutdown or Close has started: begin fails

	mu    sync.Mutex
	cut   bool           // Close, or Shutdown's context ended: add cuts the Conn at once
	conns []*Conn        // each at its c.trackAt
	wg    sync.WaitGroup // one per place begin reserved and end or forget has not given back
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

// add tracks c, made after begin, until its OnClose returns. When a
// shutdown has started meanwhile, add sends c a close frame with 1001 (its
// ReadLoop then reads the answer); when the connections are being cut, it
// ends c at once and returns false.
func (t *tracker) add(c *Conn) bool {
	t.mu.Lock()
	c.trackAt = int32(len(t.conns))
	t.conns = append(t.conns, c)
	c.tracker = t
	cut, closing := t.cut, t.closing.Load()
	t.mu.Unlock()
	switch {
	case cut:
		cutConn(c)
		return false
	case closing:
		c.startClose(StatusGoingAway, goingAwayReason)
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
	}
	t.mu.Unlock()
	t.wg.Done()
}

func (t *tracker) snapshotLocked() []*Conn {
	return append([]*Conn(nil), t.conns...)
}

// shutdown sends a close frame with 1001 to every connection, each on a
// goroutine of its own, and waits until every connection has ended or ctx
// is done; then it cuts those that remain, waits for their OnClose, and
// returns ctx.Err(). It returns once the close-frame goroutines have.
func (t *tracker) shutdown(ctx context.Context) error {
	t.closing.Store(true)
	t.mu.Lock()
	conns := t.snapshotLocked()
	t.mu.Unlock()
	var closers sync.WaitGroup
	for _, c := range conns {
		closers.Go(func() { c.startClose(StatusGoingAway, goingAwayReason) })
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
	t.closing.Store(true)
	t.mu.Lock()
	t.cut = true
	conns := t.snapshotLocked()
	t.mu.Unlock()
	for _, c := range conns {
		cutConn(c)
	}
}

// cutConn closes c without a close handshake; its OnClose receives
// ErrServerClosed. A Conn whose ReadLoop has not started (an Upgrader's
// caller has not called it yet) is ended here, OnClose included; its
// ReadLoop, if called later, returns at once.
func cutConn(c *Conn) {
	c.abort(ErrServerClosed)
	if c.started.CompareAndSwap(false, true) {
		c.opened()
		c.finish(ErrServerClosed)
	}
}

// Shutdown sends a close frame with 1001 (going away) to every connection
// the Upgrader made, and waits until every connection has ended (their
// OnClose returned) or ctx is done. When ctx ends first, it closes the
// connections that remain, waits for their OnClose (which receives
// ErrServerClosed), and returns ctx.Err(). It returns by ctx's deadline
// whatever the peers do: each close frame is written on a goroutine of its
// own, so that a peer that does not read delays nobody else's, and cutting
// a connection ends a write blocked on it.
//
// Once Shutdown has started, Upgrade refuses requests with 503 Service
// Unavailable and returns an error wrapping ErrServerClosed. A Conn that
// Upgrade returned and whose ReadLoop has not started yet gets the close
// frame too; if it is cut, its OnClose runs in Shutdown's goroutine.
//
// net/http's Server.Shutdown does not cover hijacked connections, and so
// none of these: call both on SIGTERM, the http.Server's first (it stops
// accepting), then the Upgrader's, with one ctx (see the example). Code
// that only holds the http.Server can register the Upgrader's with
// [http.Server.RegisterOnShutdown], bounding it with a context of its own
// since the hook gets none; README's "Use" shows both.
func (u *Upgrader) Shutdown(ctx context.Context) error {
	return u.track.shutdown(ctx)
}

// Close closes every connection the Upgrader made at once, without a close
// handshake; OnClose receives ErrServerClosed. It waits for their OnClose
// calls. Afterwards Upgrade refuses requests with 503, as after Shutdown.
func (u *Upgrader) Close() error {
	u.track.close()
	return nil
}
