//go:build unix

package gust

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
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
	c     *Conn                 // whose idle reader has the RawConn, outside netpoll mode
	fn    func(fd uintptr) bool // write bound once, so that a write allocates nothing
	p     []byte                // what is left to write
	err   error
	armed bool // write set the socket's deadline
	try   bool // tryWrite: stop where the socket is full, without waiting
}

func (c *Conn) initRawWriter() {
	if c.rw != nil || c.idle == nil {
		return // netpoll mode's, with its socket; or no RawConn
	}
	c.rw = &rawWriter{c: c}
	c.rw.fn = c.rw.onFD
}

// onFD is called with the descriptor: it writes until p is gone, or arms
// the deadline and asks to wait when the socket is full.
func (w *rawWriter) onFD(fd uintptr) bool {
	n, again, err := writeFD(int(fd), w.p)
	w.p = w.p[n:]
	switch {
	case err != nil:
		w.err = err
	case again && !w.try:
		w.arm()
		return false
	}
	return true
}

// writeFD writes p to fd until it is gone or the socket is full (again),
// retrying when interrupted.
func writeFD(fd int, p []byte) (n int, again bool, err error) {
	for n < len(p) {
		k, err := syscall.Write(fd, p[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return n, true, nil
		case err != nil:
			return n, false, os.NewSyscallError("write", err)
		case k == 0:
			return n, false, io.ErrUnexpectedEOF
		}
		n += k
	}
	return n, false, nil
}

// arm sets the socket's write deadline before a wait: WriteTimeout from
// now, or SetWriteDeadline's deadline when it comes sooner.
func (w *rawWriter) arm() {
	d := w.c.cfg.WriteTimeout
	if d <= 0 {
		return // a deadline set with SetWriteDeadline is on the socket already
	}
	dl := time.Now().Add(d)
	if u := w.c.wr.userDeadline.Load(); u != 0 && u < dl.UnixNano() {
		dl = time.Unix(0, u)
	}
	w.c.conn.SetWriteDeadline(dl)
	w.armed = true
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
	ok, err := w.c.sockDo(dirWrite, w)
	if !ok {
		err = w.c.idle.raw.Write(w.fn)
	}
	if w.armed {
		w.armed = false
		var dl time.Time
		if u := w.c.wr.userDeadline.Load(); u != 0 {
			dl = time.Unix(0, u)
		}
		w.c.conn.SetWriteDeadline(dl)
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
