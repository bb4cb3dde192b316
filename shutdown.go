package gust

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gustws/gust/internal/track"
)

// goingAwayReason is the reason of the close frame a shutdown sends, and
// drainReason that of a drain's.
const (
	goingAwayReason = "server shutting down"
	drainReason     = "server draining"
)

// tracker keeps the connections an Upgrader made (a Server's too, through
// its Upgrader field), so that Shutdown, Drain and Close reach them.
type tracker = track.Set[*Conn, connOps]

// connOps is what the tracker does to a Conn (track.Ops): methods on a type
// of their own rather than on Conn, whose methods are its API, and no
// memory added to a Conn.
type connOps struct{}

func (connOps) Index(c *Conn) *int32 { return &c.trackAt }
func (connOps) RefuseWrites(c *Conn) { c.closing.take(closeDue) }
func (connOps) Cut(c *Conn)          { cutConn(c) }

func (connOps) StartClose(c *Conn, code uint16, reason string) {
	c.startClose(StatusCode(code), reason)
}

func (connOps) CloseNoWait(c *Conn, code uint16, reason string, wg *sync.WaitGroup) {
	c.closeNoWait(StatusCode(code), reason, wg)
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
	return u.track.Shutdown(ctx, uint16(StatusGoingAway), goingAwayReason)
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
	err = u.track.Drain(ctx, window, uint16(code), drainReason)
	if err == nil {
		err = u.track.WaitEmpty(ctx)
	}
	if err != nil {
		u.track.Close()
		return err
	}
	return u.track.Shutdown(ctx, 0, "") // the closes are sent: nothing left to wait for but handshakes
}

// Draining reports whether the Upgrader refuses new connections: Drain,
// Shutdown or Close has started. A health route answers 503 when it does,
// so that the load balancer sends new clients elsewhere.
func (u *Upgrader) Draining() bool {
	return u.track.Draining() || u.track.Closing()
}

// Close cuts every connection the Upgrader made, without a close handshake
// (OnClose receives ErrServerClosed), and waits for their OnClose calls.
// Afterwards Upgrade refuses requests with 503, as after Shutdown.
func (u *Upgrader) Close() error {
	u.track.Close()
	return nil
}
