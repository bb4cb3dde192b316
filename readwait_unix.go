//go:build unix

package gust

import (
	"io"
	"net"
	"syscall"

	"github.com/gustws/gust/internal/netpoll"

	"github.com/gustws/gust/internal/bufpool"
)

// An idle connection holds no read buffer: when every byte read has been
// dispatched, the read goroutine waits for readability through the
// runtime's netpoller (syscall.RawConn) and takes a buffer from the pool
// only once bytes have arrived. Connections that are not a syscall.Conn,
// such as TLS, keep a buffer while they wait.

// idleReader is the part of a Conn that reads through a syscall.RawConn
// (in goroutine mode; netpoll mode reads from gust's own socket).
type idleReader struct {
	raw        syscall.RawConn
	fn         func(fd uintptr) bool // onFD bound once, so that a wait allocates nothing (RawConn)
	try        bool                  // read once, without waiting
	wouldBlock bool                  // try found nothing to read
	dst        []byte                // where to read, if not into a pooled buffer
	size       int
	buf        *[]byte
	n          int
	err        error

	rw rawWriter // writes through the same RawConn
}

func (c *Conn) initIdleReader() {
	if c.np != nil {
		return // netpoll mode reads from gust's own socket
	}
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.idle = &idleReader{raw: raw, size: c.idleReadSize()}
	c.idle.fn = c.idle.onFD
}

// onFD is called with the descriptor: it reads into a pooled buffer, or
// gives the buffer back and asks to wait when there is nothing to read;
// with try set, it reports in wouldBlock that there was nothing, and does
// not wait.
func (ir *idleReader) onFD(fd uintptr) bool {
	done := ir.read(fd)
	if ir.try {
		ir.wouldBlock = !done
		return true
	}
	return done
}

// read reads into a pooled buffer (or dst), or gives the buffer back and
// reports false when there is nothing to read.
func (ir *idleReader) read(fd uintptr) bool {
	dst, buf := ir.dst, (*[]byte)(nil)
	if dst == nil {
		buf = bufpool.Get(ir.size)
		dst = *buf
	}
	n, again, err := netpoll.ReadFD(int(fd), dst)
	switch {
	case again:
		bufpool.Put(buf)
		return false
	case err != nil:
		bufpool.Put(buf)
		ir.n, ir.err = 0, err
	default:
		ir.buf, ir.n, ir.err = buf, n, nil
	}
	return true
}

// fillIdle reads into a fresh buffer when the read buffer is drained. It
// reports false when the connection cannot wait without a buffer. In
// netpoll mode it does not wait (mayPark): it returns errPark when there is
// nothing to read, and the caller parks the connection.
func (c *Conn) fillIdle() (bool, error) {
	if c.idle == nil && c.np == nil {
		return false, nil
	}
	c.rd.release()
	c.rd.putSlab()
	if err := c.uncork(); err != nil {
		return true, err
	}
	if err := c.boundMessage(); err != nil {
		return true, err
	}
	for {
		_, err := c.idleRead(nil, c.mayPark())
		if err == nil {
			return true, nil
		}
		if err = c.overdue(err); err != nil {
			return true, err
		}
	}
}

// tryRead is read on an event loop: it reads what has arrived into p,
// without waiting, and returns errPark when nothing has, or when the last
// read came short of its buffer: it took all there was then, and the
// descriptor is edge-triggered, so bytes that came since have queued a
// readable event, which resumes the connection once it parks (this saves
// the read that would find nothing). Not once the loop has seen the peer's
// end (peerEnded): a FIN that came with the last bytes, in their event, queues
// none, and only a read finds it. A connection that has done
// loopWorkBudget of work in this turn is handed to a goroutine (errHandoff),
// so that a peer that keeps sending cannot hold up the loop.
func (c *Conn) tryRead(p []byte) (int, error) {
	return c.idleRead(p, true)
}

// idleRead is the one read of fillIdle and tryRead: into dst, or, when dst
// is nil, into a fresh pooled buffer that becomes the read buffer; without
// waiting when park is set (errPark when nothing has arrived). On an event
// loop it first applies the turn's limits (tryRead). It reads through the
// idle reader's RawConn, or in netpoll mode from gust's own socket.
func (c *Conn) idleRead(dst []byte, park bool) (int, error) {
	if c.rd.loop {
		if c.rd.drained {
			c.hbWaiting()
			return 0, errPark
		}
		if c.rd.work >= loopWorkBudget {
			return 0, errHandoff
		}
	}
	c.hbWaiting()
	var (
		buf   *[]byte
		n     int
		again bool
		err   error
	)
	if c.np != nil {
		buf, n, again, err = c.sockRead(dst, park)
	} else {
		ir := c.idle
		ir.dst, ir.try = dst, park
		if err = ir.raw.Read(ir.fn); err == nil {
			err = ir.err
		}
		buf, n, again = ir.buf, ir.n, ir.wouldBlock
		ir.dst, ir.buf, ir.err, ir.wouldBlock = nil, nil, nil, false
	}
	switch {
	case err == io.EOF:
		return 0, err
	case err != nil:
		return 0, c.readError(err)
	case again:
		return 0, errPark
	}
	size := len(dst)
	if dst == nil {
		c.rd.buf, c.rd.r, c.rd.w = buf, 0, n
		size = c.idleReadSize()
	}
	if c.rd.loop {
		c.rd.addWork(n)
	}
	c.rd.drained = c.rd.loop && n < size && !c.peerEnded()
	c.hbArrived()
	return n, c.cork(drainedBatch(n, size))
}

// readError wraps err as the net.Conn's own Read would.
func (c *Conn) readError(err error) error {
	la := c.conn.LocalAddr()
	return &net.OpError{Op: "read", Net: la.Network(), Source: la, Addr: c.conn.RemoteAddr(), Err: err}
}
