// Package netpoll holds gust's event loops and the socket they wait on.
//
// In netpoll mode a connection's descriptor is duplicated once its
// handshake is done and its *net.TCPConn (or *net.UnixConn) closed (Adopt):
// the Sock that replaces it is waited on by one of a few event loops (about
// one per GOMAXPROCS, each an epoll instance), not by the runtime's
// netpoller. A connection with nothing to read parks: it has no goroutine,
// and its loop calls its Owner's Readable when bytes arrive. Calls that wait
// on a Sock (a write into a full socket, a read that must block) are woken
// by the same loop, which watches both directions, edge-triggered.
//
// crypto/tls reads the net.Conn it was made over for its life: a *tls.Conn
// made over an Under (Listener) goes to a loop as its Under moves to a Sock.
// Raw is goroutine mode's way to the descriptor, through the runtime's
// netpoller.
//
// The package knows nothing of WebSocket: an Owner is whatever serves the
// bytes. Event loops need epoll (Linux); elsewhere Adopt fails with
// errors.ErrUnsupported and no Sock exists.
package netpoll

import (
	"sync"
	"time"
)

// Owner is the connection a Sock belongs to, which its event loop serves.
type Owner interface {
	// Sock returns the owner's socket.
	Sock() *Sock
	// Readable is called on the event loop when the parked socket turned
	// readable, or saw the peer's end: it serves what arrived, without
	// waiting, then parks the socket again (Register, Park) or hands it to
	// a goroutine. It reports whether it ran code of the owner's user (a
	// callback), for Held.
	Readable() (user bool)
	// Wake is called when a parked socket must be looked at by a goroutine
	// (a wake-up timer fired, its loop failed): Unpark tells whether it is
	// still parked, and then the owner serves it on a goroutine of its own.
	Wake()
	// Held reports that one call of Readable held the loop for d, longer
	// than HeldThreshold; user is what that call returned.
	Held(d time.Duration, user bool)
}

// HeldThreshold is how long serving one connection may hold an event loop
// before the loop reports it (Owner.Held).
const HeldThreshold = 100 * time.Millisecond

// Whether a goroutine serves a Sock or its loop waits for it to turn
// readable.
const (
	running int32 = iota // a goroutine reads the connection, or will
	parked               // in its loop, with no goroutine
)

// Directions a call on a socket may wait in.
const (
	dirRead = iota
	dirWrite
)

// Park marks s parked: from now on its loop calls the owner's Readable when
// bytes arrive, and the caller must not touch s or its owner again, unless
// Park reports resumed. It does so when the caller must go on serving the
// connection instead: whatever came on its way here (bytes, the socket's
// close, a read deadline passed) found it running, and woke nothing. The
// caller registers s first (Register).
func (s *Sock) Park() (resumed bool) {
	s.state.Store(parked)
	d := s.dl[dirRead].Load()
	missed := s.ready.Swap(false) || s.use.Load()&sockClosed != 0 || (d != 0 && time.Now().UnixNano() >= d)
	return missed && s.state.CompareAndSwap(parked, running)
}

// Unpark takes a parked s back for the caller, which serves it from then
// on; it reports false when s was not parked.
func (s *Sock) Unpark() bool { return s.state.CompareAndSwap(parked, running) }

// Parked reports whether s is parked.
func (s *Sock) Parked() bool { return s.state.Load() == parked }

// Resumed is called by whoever serves s after it was parked, before its
// first read: the reads that follow see whatever made it ready.
func (s *Sock) Resumed() { s.ready.Store(false) }

// PeerEnded reports whether the loop has seen the peer's end (RDHUP, HUP or
// ERR): a read that comes short of its buffer no longer means the socket is
// drained, since no event follows the end.
func (s *Sock) PeerEnded() bool { return s.hup.Load() }

// waits is where calls that wait on a Sock block, and the timers that wake
// its parked owner; a Sock that never waits and has no timer has none.
type waits struct {
	mu    sync.Mutex
	ch    [2]chan struct{} // closed to wake the calls waiting in a direction
	timer *time.Timer      // wakes the parked owner at the read deadline (WakeAt)
	after *time.Timer      // wakes it after a delay (WakeAfter)
}

// waits returns s's waits, made by the first call.
func (s *Sock) waits() *waits {
	if w := s.w.Load(); w != nil {
		return w
	}
	s.w.CompareAndSwap(nil, new(waits))
	return s.w.Load()
}

// WakeAt has o woken (Owner.Wake) at t, when a read deadline passes while s
// is parked (a socket enforces deadlines only on calls that wait); a zero t
// cancels it.
func (s *Sock) WakeAt(t time.Time, o Owner) {
	w := s.w.Load()
	if w == nil {
		if t.IsZero() {
			return
		}
		w = s.waits()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case t.IsZero():
		if w.timer != nil {
			w.timer.Stop()
		}
	case w.timer == nil:
		w.timer = time.AfterFunc(time.Until(t), o.Wake)
	default:
		w.timer.Reset(time.Until(t))
	}
}

// WakeAfter has o woken (Owner.Wake) after d, independently of WakeAt.
func (s *Sock) WakeAfter(d time.Duration, o Owner) {
	w := s.waits()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.after == nil {
		w.after = time.AfterFunc(d, o.Wake)
	} else {
		w.after.Reset(d)
	}
}

// stopTimers stops the timers that would wake s's owner.
func (s *Sock) stopTimers() {
	w := s.w.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.after != nil {
		w.after.Stop()
	}
	w.mu.Unlock()
}
