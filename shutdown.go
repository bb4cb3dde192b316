package gust

import (
	"context"
	"sync"
	"sync/atomic"
)

// goingAwayReason is the reason of the close frame a shutdown sends.
const goingAwayReason = "server shutting down"

// tracker keeps the connections an Upgrader made (a Server's too, through
// its Upgrader field), so that Shutdown and Close reach them: a slot in a
// slice per connection, no goroutine. begin reserves a place before the
// handshake (refused once a shutdown has started); then add tracks the Conn,
// or end gives the place back when none was made; forget drops a Conn once
// its OnClose has returned.
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

// add tracks c, made after begin. If a shutdown has started meanwhile, it
// sends c a close frame with 1001; if the connections are being cut, it
// ends c and returns false.
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

// shutdown sends 1001 to every connection, each on a goroutine of its own,
// and waits until they have ended or ctx is done; then it cuts the rest,
// waits for their OnClose, and returns ctx.Err().
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
// Meanwhile and afterwards, Upgrade refuses requests with 503 and an error
// wrapping ErrServerClosed. A Conn whose ReadLoop has not started gets the
// close frame too; if cut, its OnClose runs in Shutdown's goroutine.
//
// net/http's Server.Shutdown does not cover hijacked connections: on
// SIGTERM call the http.Server's first (it stops accepting), then the
// Upgrader's, with one ctx. README's "Use" shows how, also with
// [http.Server.RegisterOnShutdown].
func (u *Upgrader) Shutdown(ctx context.Context) error {
	return u.track.shutdown(ctx)
}

// Close cuts every connection the Upgrader made, without a close handshake
// (OnClose receives ErrServerClosed), and waits for their OnClose calls.
// Afterwards Upgrade refuses requests with 503, as after Shutdown.
func (u *Upgrader) Close() error {
	u.track.close()
	return nil
}
