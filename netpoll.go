package gust

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/netpoll"
)

// Netpoll mode (Options.Netpoll): a connection that has read every byte it
// was sent gives up its goroutine as well as its read buffer. It is parked
// on one of the event loops of internal/netpoll, in a socket of gust's own
// (netpoll.Sock). When bytes arrive, the loop reads them into a pooled
// buffer, parses and dispatches them itself, and parks the connection
// again; the buffer goes back once drained. A frame that arrives in pieces
// is parsed as far as its bytes go, and the parser resumes there at the
// next readable event (readState keeps the frame in progress). An idle
// connection then costs its Conn and its socket, and nothing else.
//
// A loop never waits. What would wait goes to a goroutine started for the
// connection (handOff), which serves it as goroutine mode does until it
// is idle again, and parks it: writes the socket did not take at once
// (netWriteBacklog), a message streamed to its handler (StreamThreshold),
// Options.Parallel's handlers all busy, the write lock held by another
// goroutine, and a peer that keeps sending or a message that takes long to
// inflate (loopWorkBudget). The peer's close frame and the end of the
// connection go to the few goroutines that end connections (loopEnds).

// loopConn is a Conn as its event loop sees it (netpoll.Owner), and the
// transport of a Conn in netpoll mode.
type loopConn Conn

func (lc *loopConn) Sock() *netpoll.Sock { return (*Conn)(lc).sock() }

// Readable serves a parked connection on its event loop, which found it
// readable, and reports whether a callback ran.
func (lc *loopConn) Readable() bool {
	c := (*Conn)(lc)
	c.sock().Resumed()
	c.takeRead()
	c.rd.startTurn()
	return c.serve(false)
}

// Wake resumes c if it is parked, on a goroutine of its own: a read then
// reports whatever ended or woke it (a closed socket, a read deadline, the
// message's bound).
func (lc *loopConn) Wake() { (*Conn)(lc).wake() }

// Held reports that serving c held its event loop for d, past
// netpoll.HeldThreshold: "blocked" if a callback ran meanwhile, else
// "held" (gust's own work, or the loop waiting for a CPU).
func (lc *loopConn) Held(d time.Duration, called bool) {
	kind := netpollHeld
	if called {
		kind = netpollBlocked
	}
	(*Conn)(lc).noteNetpoll(kind, slog.Duration("held", d))
}

// adopt gives c a socket of gust's own in place of its *net.TCPConn
// or *net.UnixConn, registered with an event loop: netpoll mode. A
// *tls.Conn made over a netpoll.Under (Server.ServeTLS, Dial) keeps its
// place, and its Under moves to the socket. Any other connection (TLS
// made elsewhere, an HTTP/2 stream, a wrapper) stays in goroutine mode,
// and so does one whose descriptor cannot be duplicated or registered (at
// the descriptor limit, EMFILE), for its whole life: its net.Conn is in use
// from then on by any goroutine (writes, deadlines, NetConn's callers), and
// swapping it later would race with them. Either fallback is reported, and
// adopt returns false.
func (lc *loopConn) adopt() bool {
	c := (*Conn)(lc)
	if h := dupHook.Load(); h != nil {
		if err := (*h)(c); err != nil {
			lc.fallback(netpollFallbackFD, err)
			return false
		}
	}
	var err error
	if u := netpoll.UnderOf(c.conn); u != nil {
		err = u.Adopt(lc.register) // TLS over an Under: the connection it wraps moves
	} else {
		err = lc.adoptConn()
	}
	switch {
	case errors.Is(err, netpoll.ErrNotSocket):
		lc.fallback(netpollFallbackType, nil)
	case errors.Is(err, errors.ErrUnsupported):
		// no event loops here (not Linux): goroutine mode, as documented
	case err != nil:
		lc.fallback(netpollFallbackFD, err)
	}
	return err == nil
}

// adoptConn puts a socket of gust's own, registered, in place of c's
// net.Conn, which it closes; on failure c keeps its net.Conn.
func (lc *loopConn) adoptConn() error {
	s, err := netpoll.Adopt(lc.conn)
	if err != nil {
		return err
	}
	orig := lc.conn
	lc.conn = s
	if err := lc.register(s); err != nil {
		s.Close()
		lc.conn = orig
		return err
	}
	orig.Close()
	return nil
}

func (lc *loopConn) register(s *netpoll.Sock) error { return s.Register(lc) }

// fallback reports that c stays in goroutine mode despite
// Options.Netpoll: kind is netpollFallbackFD (err is why) or
// netpollFallbackType.
func (lc *loopConn) fallback(kind int, err error) {
	attr := slog.Any("err", err)
	if kind == netpollFallbackType {
		attr = slog.String("type", fmt.Sprintf("%T", lc.conn))
	}
	(*Conn)(lc).noteNetpoll(kind, attr)
}

// dupHook is nil but in tests (export_linux_test.go): it is called before a
// connection's descriptor is duplicated, and an error it returns fails the
// duplication, as the descriptor limit would.
var dupHook atomic.Pointer[func(c *Conn) error]

// park hands c to the event loop, and reports whether the calling goroutine
// must go on serving it instead: bytes arrived while it was parking, its
// read deadline passed, or it could not be registered (its socket is
// closed, which the next read reports). Otherwise the calling goroutine must
// not touch c again.
func (lc *loopConn) park() bool {
	c := (*Conn)(lc)
	s := c.sock()
	c.rd.shrink()
	if left, ok := c.rd.messageLeft(); ok && !c.rd.armed {
		// The message or TLS record in progress has its bound
		// (Options.MessageTimeout): wake c then. Left in place once the
		// message ends, a wake-up for an earlier message finds nothing
		// overdue and parks c again.
		s.WakeAfter(left, (*loopConn)(c))
		c.rd.armed = true
	}
	if err := s.Register((*loopConn)(c)); err != nil {
		return true // still running: the next read reports why
	}
	// Once parked, c may be resumed on another goroutine at once: its read
	// state goes back before.
	c.putRead()
	if h := parkHook.Load(); h != nil {
		(*h)(c, c.rd != nil)
	}
	if s.Park() {
		c.takeRead()
		return true
	}
	return false
}

// parkHook is nil but in tests (export_linux_test.go): it is called by each
// connection that parks, with whether it keeps its read state.
var parkHook atomic.Pointer[func(c *Conn, holdsRead bool)]

// resume serves a parked connection again, on a goroutine the event loop
// (or whatever woke it) started for it.
func (lc *loopConn) resume() {
	c := (*Conn)(lc)
	c.sock().Resumed()
	c.takeRead()
	c.rd.armed = false // the wake-up may have been the message's bound: the next park sets it again
	c.rd.loop = false
	c.serve(false)
}

// wake resumes c if it is parked, on a goroutine of its own.
func (c *Conn) wake() {
	if s := c.sock(); s != nil && s.Unpark() {
		go (*loopConn)(c).resume()
	}
}

// wakeAt arranges for c to be woken at t, when a read deadline passes
// while it is parked.
func (c *Conn) wakeAt(t time.Time) {
	if s := c.sock(); s != nil {
		s.WakeAt(t, (*loopConn)(c))
	}
}

// unpark takes c out of its event loop when it ends (if it is in netpoll
// mode); the running goroutine calls it before the socket is closed.
func (c *Conn) unpark() {
	if s := c.sock(); s != nil {
		s.Remove((*loopConn)(c))
	}
}

// peerEnded reports whether c's event loop has seen the peer's end, or
// whether c is TLS, whose layer may hold whole records it read: either
// way a read that came short of its buffer may not have drained it.
func (c *Conn) peerEnded() bool {
	s := c.sock()
	return s != nil && (s.PeerEnded() || c.conn != s)
}

// sock returns c's own socket in netpoll mode, nil in goroutine mode.
func (c *Conn) sock() *netpoll.Sock {
	switch nc := c.conn.(type) {
	case *netpoll.Sock:
		return nc
	case *tls.Conn:
		if u, ok := nc.NetConn().(*netpoll.Under); ok {
			return u.Sock()
		}
	}
	return nil
}

func (lc *loopConn) direct() bool   { return true }
func (lc *loopConn) inRecord() bool { return false }

func (lc *loopConn) read(dst []byte, try bool) (buf *[]byte, n int, again bool, err error) {
	c := (*Conn)(lc)
	if dst == nil {
		buf = bufpool.Get(c.cfg.idleReadSize())
		dst = *buf
	}
	s := c.sock()
	n, again, err = s.ReadSome(dst, try)
	if err != nil || again {
		bufpool.Put(buf)
		if err != nil && err != io.EOF {
			err = s.OpError("read", err)
		}
		return nil, 0, again, err
	}
	return buf, n, false, nil
}

// write writes p to c's own socket: what it takes at once when try is set,
// else all of it, waiting on the event loop under the write timeout, which
// is armed only for the wait (as rawTransport's).
func (lc *loopConn) write(p []byte, try bool) (int, error) {
	c := (*Conn)(lc)
	s := c.sock()
	n, armed, err := s.WriteSome(p, try, func() bool { return c.wr.armTimeout(s, c.cfg.WriteTimeout) })
	if armed {
		s.SetWriteDeadline(c.wr.deadline())
	}
	if err != nil {
		return n, s.OpError("write", err)
	}
	return n, nil
}

// tlsLoop is the transport of a TLS connection in netpoll mode: crypto/tls
// over the netpoll.Under it was made over, moved to gust's socket, which
// reads without waiting and keeps what the socket does not take.
type tlsLoop struct{ tlsTransport }

func (t *tlsLoop) direct() bool { return true }

func (t *tlsLoop) read(dst []byte, try bool) (buf *[]byte, n int, again bool, err error) {
	c := t.c
	if dst == nil {
		buf = bufpool.Get(c.cfg.idleReadSize())
		dst = *buf
	}
	if n, again, err = t.u.ReadThrough(c.conn, dst, try); n == 0 {
		bufpool.Put(buf)
		return nil, 0, again, err
	}
	return buf, n, false, nil
}

// write writes p through crypto/tls, as loopConn's does. With try set,
// records the socket did not take whole stay in the Under: an empty
// backlog says so, and the goroutine that writes it writes them first.
func (t *tlsLoop) write(p []byte, try bool) (int, error) {
	c, u := t.c, t.u
	s := u.Sock()
	n, armed, err := u.WriteThrough(c.conn, p, try, func() bool { return c.wr.armTimeout(s, c.cfg.WriteTimeout) })
	if armed {
		s.SetWriteDeadline(c.wr.deadline())
	}
	if try && n > 0 && err == nil && u.Pending() {
		c.wr.appendBacklog(nil)
	}
	return n, err
}

// close closes c's TLS connection with a close_notify, unless a write is
// in flight (the write lock is held), which may wait on a full socket:
// then the socket is cut, as crypto/tls's Close does for its own writes.
func (t *tlsLoop) close() {
	c := t.c
	if !c.wr.mu.TryLock() {
		t.u.Close()
		return
	}
	defer c.wr.mu.Unlock()
	c.conn.Close()
}
