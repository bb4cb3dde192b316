package gust

import (
	"errors"
	"io"
	"math/bits"
	"net"
	"time"

	"github.com/gustws/gust/internal/netpoll"
)

// A transport carries a connection's bytes once its handshake is done. It
// is chosen once, when the connection gets its net.Conn (attach), by what
// that is and by Options.Netpoll:
//
//   - loopConn (netpoll.go): in netpoll mode, gust's own socket, which an
//     event loop waits on (internal/netpoll); tlsLoop, crypto/tls over it;
//   - rawTransport: in goroutine mode, a *net.TCPConn or
//     *net.UnixConn, read and written through its syscall.RawConn, so that
//     an idle connection waits for bytes without a read buffer and a write
//     arms WriteTimeout only when it must wait;
//   - netConnTransport: any other net.Conn (TLS, an HTTP/2 stream, a
//     wrapper), through its Read and Write; tlsTransport, the TLS gust made
//     over a netpoll.Under, in goroutine mode.
//
// The TLS gust makes (Server.ServeTLS, wss:// Dials) is made over a
// netpoll.Under in either mode, which follows crypto/tls's records: a
// record that has begun is bounded as a message is (boundMessage).
type transport interface {
	// read reads once into p or, when p is nil (direct transports only),
	// into a pooled buffer of idleReadSize bytes it takes once bytes have
	// arrived, and returns. With try set (direct transports only) it does
	// not wait: again reports that nothing had arrived. A read of 0 bytes without an error
	// is tried again. Errors are wrapped as a net.Conn's Read wraps them,
	// but io.EOF.
	read(p []byte, try bool) (buf *[]byte, n int, again bool, err error)
	// write writes p whole, waiting under the write timeout, or, with try
	// set, what the socket takes at once.
	write(p []byte, try bool) (int, error)
	// direct reports whether the transport reaches the descriptor: a read
	// may wait without a buffer, and a read or a write may try.
	direct() bool
	// inRecord reports whether a layer under the WebSocket (crypto/tls)
	// holds part of a record it read, which it gives up only whole: the
	// next read waits for its rest (messageLeft).
	inRecord() bool
}

// chooseTransport returns c's transport for its net.Conn.
func (c *Conn) chooseTransport() transport {
	if c.server && netpoll.LimitUnsent(c.conn, unsentLimit) {
		c.wr.unsent = unsentShift
	}
	var tl *tlsLoop // TLS over an Under: its transport either way, made first
	if u := netpoll.UnderOf(c.conn); u != nil {
		tl = &tlsLoop{tlsTransport{netConnTransport: netConnTransport{c: c}, u: u}}
		u.SetBounder(&tl.tlsTransport) // before adopt: a loop may read c at once
	}
	if c.cfg.Netpoll {
		c.polled = true // before adopt: a loop may serve c at once
		if (*loopConn)(c).adopt() {
			if tl != nil {
				return tl
			}
			return (*loopConn)(c)
		}
		c.polled = false // goroutine mode after all: no loop has it
	}
	if t := newRawTransport(c); t != nil {
		return t
	}
	if tl != nil {
		return &tl.tlsTransport
	}
	return &netConnTransport{c: c}
}

// unsentLimit is about the most a server connection's socket holds that
// the kernel has not sent (netpoll.LimitUnsent), until a larger write
// raises it (raiseUnsent). A client's socket keeps the kernel's default: a
// client has few connections, and code that writes a lot before it reads
// (deadlocked with a server that echoes, but for the kernel's buffers)
// keeps working as it did. A peer that stops reading holds this much of the kernel's
// memory, not its 4 MiB send buffer, and the rest of what is written to it
// waits in the outbox, where OutboxSize and WriteTimeout bound it. Without
// it, 1,000 members that never read, fed a 2 MB history, took 1.5 GB of the
// kernel's memory (past tcp_mem's pressure mark) and 3 s of copying, and
// everyone's live messages waited behind that (histbench's lag scenario).
const (
	unsentShift = 16
	unsentLimit = 1 << unsentShift // 64 KiB
)

// raiseUnsent raises the socket's unsent limit to fit a write of n bytes
// (a power of two, at most maxUnsent) before the write: a large message
// goes to the kernel in one system call, as it would without the limit. A
// connection keeps the largest limit it needed.
func (w *writeState) raiseUnsent(n int) {
	shift := uint8(min(bits.Len(uint(n-1)), maxUnsentShift))
	if shift <= w.unsent {
		return
	}
	if !netpoll.LimitUnsent(w.conn().conn, 1<<shift) {
		w.unsent = 0 // not a socket that takes it any more: stop asking
		return
	}
	w.unsent = shift
}

// maxUnsentShift is log2 of tcp_wmem's default maximum (4 MiB): past it the
// limit changes nothing.
const maxUnsentShift = 22

// direct reports whether c's transport reaches the descriptor
// (transport.direct); false before c has a net.Conn.
func (c *Conn) direct() bool { return c.tr != nil && c.tr.direct() }

// idleReadSize is the size of the pooled buffer a read into no buffer
// takes.
func (cfg *config) idleReadSize() int { return max(cfg.ReadBufferSize, minReadBufferSize) }

// netConnTransport is the transport of a connection gust cannot reach the
// descriptor of (TLS, HTTP/2 streams, wrappers): its net.Conn's Read and
// Write.
type netConnTransport struct {
	c         *Conn
	refreshAt int64 // when the write deadline is next moved, in Unix ns; under the write lock
}

// read reads into p, waiting: it is not direct, so fill always gives it a
// buffer (a connection that cannot wait without one keeps a small one).
func (t *netConnTransport) read(p []byte, try bool) (*[]byte, int, bool, error) {
	n, err := t.c.conn.Read(p)
	if n > 0 {
		return nil, n, false, nil // an error comes again at the next read
	}
	return nil, 0, false, err
}

// write keeps the socket's write deadline at most Options.WriteTimeout
// ahead (or at SetWriteDeadline's, if sooner), moving it when a quarter of
// the timeout has passed since the last move: a write that makes no
// progress fails after 0.75 to 1 times the timeout, and a busy connection
// pays for one deadline change every few seconds, not one per write.
func (t *netConnTransport) write(p []byte, try bool) (int, error) {
	c := t.c
	w := &c.wr
	if d := c.cfg.WriteTimeout; d > 0 {
		if now := time.Now(); w.userChanged.Load() || now.UnixNano() >= t.refreshAt {
			w.userChanged.Store(false)
			dl := now.Add(d)
			if u := w.userDeadline.Load(); u != 0 && u < dl.UnixNano() {
				dl = time.Unix(0, u)
			}
			c.conn.SetWriteDeadline(dl)
			t.refreshAt = now.Add(d / 4).UnixNano()
		}
	}
	return c.conn.Write(p)
}

func (t *netConnTransport) direct() bool   { return false }
func (t *netConnTransport) inRecord() bool { return false }

// tlsTransport is the transport of a TLS connection gust made over a
// netpoll.Under (Server.ServeTLS, Dial) in goroutine mode: netConnTransport's,
// with reads through the Under, which follows crypto/tls's records and
// bounds a read in the middle of one (BoundRead).
type tlsTransport struct {
	netConnTransport
	u *netpoll.Under
}

func (t *tlsTransport) read(p []byte, try bool) (*[]byte, int, bool, error) {
	n, _, err := t.u.ReadThrough(t.c.conn, p, false)
	return nil, n, false, err
}

func (t *tlsTransport) direct() bool   { return false }
func (t *tlsTransport) inRecord() bool { return t.u.InRecord() }

// BoundRead is called by the Under (netpoll.Bounder) before each read
// crypto/tls makes of the connection, in either mode: the record in
// progress, if any, gets the bound of a message in progress
// (boundMessage), which in goroutine mode sets the read deadline for the
// wait inside crypto/tls's Read, and on a loop is kept for the park.
func (t *tlsTransport) BoundRead() error { return t.c.rd.boundMessage() }

// armTimeout sets nc's write deadline before a direct write waits: d
// (WriteTimeout) from now, or SetWriteDeadline's deadline when it comes
// sooner. It reports false when there is no write timeout (a deadline set
// with SetWriteDeadline is on the socket already).
func (w *writeState) armTimeout(nc net.Conn, d time.Duration) bool {
	if d <= 0 {
		return false
	}
	dl := time.Now().Add(d)
	if u := w.userDeadline.Load(); u != 0 && u < dl.UnixNano() {
		dl = time.Unix(0, u)
	}
	nc.SetWriteDeadline(dl)
	return true
}

// deadline is SetWriteDeadline's deadline, which the socket gets back once
// a write that armed the write timeout is done.
func (w *writeState) deadline() time.Time {
	if u := w.userDeadline.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// rawTransport reads and writes a *net.TCPConn's or *net.UnixConn's
// descriptor through its syscall.RawConn (goroutine mode, Unix), still
// waiting in the runtime's netpoller: an idle connection holds no read
// buffer (netpoll.Raw). A write costs no deadline change while the socket
// takes the bytes: WriteTimeout is armed only when a write would block,
// moved at each later wait (it bounds a write that makes no progress), and
// cleared once the write completes.
type rawTransport struct {
	c   *Conn
	arm func() bool // armWrite bound once, so that a write allocates nothing
	netpoll.Raw
}

// newRawTransport returns c's raw transport, or nil when its net.Conn is
// not a syscall.Conn (or not on Unix).
func newRawTransport(c *Conn) transport {
	t := &rawTransport{c: c}
	if !t.Raw.Init(c.conn) {
		return nil
	}
	t.arm = t.armWrite
	return t
}

func (t *rawTransport) direct() bool   { return true }
func (t *rawTransport) inRecord() bool { return false }

func (t *rawTransport) read(dst []byte, try bool) (*[]byte, int, bool, error) {
	buf, n, again, err := t.Raw.Read(dst, t.c.cfg.idleReadSize(), try)
	if err != nil {
		return nil, 0, false, t.opError("read", err)
	}
	return buf, n, again, nil
}

func (t *rawTransport) write(p []byte, try bool) (int, error) {
	n, armed, err := t.Raw.Write(p, try, t.arm)
	if armed {
		t.c.conn.SetWriteDeadline(t.c.wr.deadline())
	}
	if err != nil {
		return n, t.opError("write", err)
	}
	return n, nil
}

func (t *rawTransport) armWrite() bool { return t.c.wr.armTimeout(t.c.conn, t.c.cfg.WriteTimeout) }

// opError wraps err as the net.Conn's own Read or Write would, but io.EOF;
// RawConn's errors say "raw-read" and "raw-write", unwrapped here.
func (t *rawTransport) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	if err == io.EOF {
		return err
	}
	la := t.c.conn.LocalAddr()
	return &net.OpError{Op: op, Net: la.Network(), Source: la, Addr: t.c.conn.RemoteAddr(), Err: err}
}
