//go:build unix

package gust

import (
	"errors"
	"net"

	"github.com/gustws/gust/internal/netpoll"
)

// A socket's write deadline costs a clock read and a timer change when it
// is set. Writes to a connection that is a syscall.Conn go through its
// syscall.RawConn instead, so that the write timeout costs nothing while
// the socket takes the bytes: the deadline is armed only when a write would
// block, moved at each later wait (the timeout bounds a write that makes no
// progress), and cleared once the write completes.

// rawWriter is the part of a Conn that writes through a syscall.RawConn.
// Its fields are used under the Conn's write lock.
type rawWriter struct {
	c     *Conn                 // whose idle reader has the RawConn
	fn    func(fd uintptr) bool // write bound once, so that a write allocates nothing
	p     []byte                // what is left to write
	err   error
	armed bool // write set the socket's deadline
	try   bool // tryWrite: stop where the socket is full, without waiting
}

func (c *Conn) initRawWriter() {
	if c.idle == nil {
		return // netpoll mode's own socket, or no RawConn
	}
	w := &c.idle.rw
	w.c, w.fn = c, w.onFD
}

// onFD is called with the descriptor: it writes until p is gone, or arms
// the deadline and asks to wait when the socket is full.
func (w *rawWriter) onFD(fd uintptr) bool {
	n, again, err := netpoll.WriteFD(int(fd), w.p)
	w.p = w.p[n:]
	switch {
	case err != nil:
		w.err = err
	case again && !w.try:
		w.armed = w.c.armWriteTimeout()
		return false
	}
	return true
}

// tryWrite writes what of p the socket takes at once, without waiting.
func (w *rawWriter) tryWrite(p []byte) (int, error) {
	w.try = true
	n, err := w.writeAll(p)
	w.try = false
	return n, err
}

// writeAll writes p whole, or fails.
func (w *rawWriter) writeAll(p []byte) (int, error) {
	w.p, w.err = p, nil
	err := w.c.idle.raw.Write(w.fn)
	if w.armed {
		w.armed = false
		w.c.conn.SetWriteDeadline(w.c.userWriteDeadline())
	}
	n := len(p) - len(w.p)
	w.p = nil
	if err == nil {
		err = w.err
	}
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // "raw-write": say write, as the net.Conn would
		}
		la := w.c.conn.LocalAddr()
		return n, &net.OpError{Op: "write", Net: la.Network(), Source: la, Addr: w.c.conn.RemoteAddr(), Err: err}
	}
	return n, nil
}

// rawWrites reports whether c's writes go to its descriptor (through its
// rawWriter, or its own socket in netpoll mode), so that a write can take
// what the socket takes at once without waiting (writeRaw with try).
func (c *Conn) rawWrites() bool { return c.idle != nil || c.np != nil }

// writeRaw writes p whole to c's descriptor, waiting as a write does;
// rawWrites must be true.
func (c *Conn) writeRaw(p []byte) (int, error) {
	if c.np != nil {
		return c.sockWrite(p, false)
	}
	return c.idle.rw.writeAll(p)
}

// tryWriteRaw writes what of p the socket takes at once, without waiting;
// rawWrites must be true.
func (c *Conn) tryWriteRaw(p []byte) (int, error) {
	if c.np != nil {
		return c.sockWrite(p, true)
	}
	return c.idle.rw.tryWrite(p)
}
