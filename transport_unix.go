//go:build unix

package gust

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/netpoll"
)

// rawTransport reads and writes a *net.TCPConn's or *net.UnixConn's
// descriptor through its syscall.RawConn (goroutine mode), still waiting
// in the runtime's netpoller. An idle connection holds no read buffer: the
// read goroutine waits for readability and takes a buffer from the pool
// only once bytes have arrived. A write costs no deadline change while the
// socket takes the bytes: WriteTimeout is armed only when a write would
// block, moved at each later wait (it bounds a write that makes no
// progress), and cleared once the write completes.
type rawTransport struct {
	c   *Conn
	raw syscall.RawConn

	// The read in progress, on the read goroutine.
	readFn func(fd uintptr) bool // onRead bound once, so that a wait allocates nothing
	rtry   bool                  // read once, without waiting
	again  bool                  // rtry found nothing to read
	dst    []byte                // where to read, if not into a pooled buffer
	buf    *[]byte
	n      int
	rerr   error

	// The write in progress, under the Conn's write lock.
	writeFn func(fd uintptr) bool // onWrite bound once
	p       []byte                // what is left to write
	werr    error
	armed   bool // onWrite set the socket's deadline
	wtry    bool // stop where the socket is full, without waiting
}

// newRawTransport returns c's raw transport, or nil when its net.Conn is
// not a syscall.Conn.
func newRawTransport(c *Conn) transport {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	t := &rawTransport{c: c, raw: raw}
	t.readFn, t.writeFn = t.onRead, t.onWrite
	return t
}

func (t *rawTransport) direct() bool { return true }

func (t *rawTransport) read(dst []byte, try bool) (*[]byte, int, bool, error) {
	t.dst, t.rtry = dst, try
	err := t.raw.Read(t.readFn)
	if err == nil {
		err = t.rerr
	}
	buf, n, again := t.buf, t.n, t.again
	t.dst, t.buf, t.rerr, t.again = nil, nil, nil, false
	if err != nil {
		return nil, 0, false, t.opError("read", err)
	}
	return buf, n, again, nil
}

// onRead is called with the descriptor: it reads into a pooled buffer (or
// dst), or gives the buffer back and asks to wait when there is nothing to
// read; with rtry set, it reports in again that there was nothing, and
// does not wait.
func (t *rawTransport) onRead(fd uintptr) bool {
	dst, buf := t.dst, (*[]byte)(nil)
	if dst == nil {
		buf = bufpool.Get(t.c.cfg.idleReadSize())
		dst = *buf
	}
	n, again, err := netpoll.ReadFD(int(fd), dst)
	switch {
	case again:
		bufpool.Put(buf)
		t.again = t.rtry
		return t.rtry
	case err != nil:
		bufpool.Put(buf)
		t.rerr = err
	default:
		t.buf, t.n = buf, n
	}
	return true
}

func (t *rawTransport) write(p []byte, try bool) (int, error) {
	c := t.c
	t.p, t.werr, t.wtry = p, nil, try
	err := t.raw.Write(t.writeFn)
	if t.armed {
		t.armed = false
		c.conn.SetWriteDeadline(c.wr.deadline())
	}
	n := len(p) - len(t.p)
	t.p = nil
	if err == nil {
		err = t.werr
	}
	if err != nil {
		return n, t.opError("write", err)
	}
	return n, nil
}

// onWrite is called with the descriptor: it writes until p is gone, or
// arms the deadline and asks to wait when the socket is full (stops there
// with wtry set).
func (t *rawTransport) onWrite(fd uintptr) bool {
	n, again, err := netpoll.WriteFD(int(fd), t.p)
	t.p = t.p[n:]
	switch {
	case err != nil:
		t.werr = err
	case again && !t.wtry:
		t.armed = t.c.wr.armTimeout(t.c.conn, t.c.cfg.WriteTimeout)
		return false
	}
	return true
}

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
