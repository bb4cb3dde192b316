//go:build unix

package netpoll

import (
	"net"
	"syscall"

	"github.com/gustws/gust/internal/bufpool"
)

// Raw reads and writes a *net.TCPConn's or *net.UnixConn's descriptor
// through its syscall.RawConn, still waiting in the runtime's netpoller
// (goroutine mode). An idle connection holds no read buffer: a read waits
// for readability and takes a buffer from the pool only once bytes have
// arrived. A write waits only when the socket is full, and arms its
// deadline (the caller's arm) only then.
//
// A read waits only once the system call has found nothing (EAGAIN), even
// straight after a read that came short of its buffer: the runtime's
// poller does not say when the peer's FIN came with its last bytes, in
// their readable event, and no event follows it, so a read that waited
// then would wait for good (an event loop knows it: Sock.PeerEnded). A
// new RawConn.Read also forgets the readiness seen before it, so the read
// it makes first is not one to skip either.
type Raw struct {
	raw syscall.RawConn

	// The read in progress, on the read goroutine.
	readFn func(fd uintptr) bool // onRead bound once, so that a wait allocates nothing
	size   int                   // the pooled buffer's size, when dst is nil
	rtry   bool                  // read once, without waiting
	again  bool                  // rtry found nothing to read
	dst    []byte                // where to read, if not into a pooled buffer
	buf    *[]byte
	n      int
	rerr   error

	// The write in progress, under the caller's write lock.
	writeFn func(fd uintptr) bool // onWrite bound once
	p       []byte                // what is left to write
	werr    error
	arm     func() bool
	armed   bool // arm set the socket's deadline
	wtry    bool // stop where the socket is full, without waiting
}

// Init makes r read and write nc's descriptor; it reports false when nc is
// not a syscall.Conn.
func (r *Raw) Init(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	r.raw, r.readFn, r.writeFn = raw, r.onRead, r.onWrite
	return true
}

// Read reads once into dst or, when dst is nil, into a pooled buffer of
// size bytes it takes once bytes have arrived. With try set it does not
// wait: again reports that nothing had arrived. Its errors are RawConn's
// and the system call's, unwrapped but for RawConn's own *net.OpError.
func (r *Raw) Read(dst []byte, size int, try bool) (buf *[]byte, n int, again bool, err error) {
	r.dst, r.size, r.rtry = dst, size, try
	err = r.raw.Read(r.readFn)
	if err == nil {
		err = r.rerr
	}
	buf, n, again = r.buf, r.n, r.again
	r.dst, r.buf, r.rerr, r.again = nil, nil, nil, false
	if err != nil {
		return nil, 0, false, err
	}
	return buf, n, again, nil
}

// onRead is called with the descriptor: it reads into a pooled buffer (or
// dst), or gives the buffer back and asks to wait when there is nothing to
// read; with rtry set, it reports in again that there was nothing, and
// does not wait.
func (r *Raw) onRead(fd uintptr) bool {
	dst, buf := r.dst, (*[]byte)(nil)
	if dst == nil {
		buf = bufpool.Get(r.size)
		dst = *buf
	}
	n, again, err := ReadFD(int(fd), dst)
	switch {
	case again:
		bufpool.Put(buf)
		r.again = r.rtry
		return r.rtry
	case err != nil:
		bufpool.Put(buf)
		r.rerr = err
	default:
		r.buf, r.n = buf, n
	}
	return true
}

// Write writes p whole, or with try set what the socket takes at once.
// arm is called before each wait, and reports whether it set a deadline
// for it (armed: the caller puts the deadline back). Its errors
// are as Read's.
func (r *Raw) Write(p []byte, try bool, arm func() bool) (n int, armed bool, err error) {
	r.p, r.werr, r.wtry, r.arm = p, nil, try, arm
	err = r.raw.Write(r.writeFn)
	armed, r.armed, r.arm = r.armed, false, nil
	n = len(p) - len(r.p)
	r.p = nil
	if err == nil {
		err = r.werr
	}
	return n, armed, err
}

// Left returns what the write in progress has left to write.
func (r *Raw) Left() int { return len(r.p) }

// onWrite is called with the descriptor: it writes until p is gone, or
// arms the deadline and asks to wait when the socket is full (stops there
// with wtry set).
func (r *Raw) onWrite(fd uintptr) bool {
	n, again, err := WriteFD(int(fd), r.p)
	r.p = r.p[n:]
	switch {
	case err != nil:
		r.werr = err
	case again && !r.wtry:
		if r.arm != nil && r.arm() { // at each wait: the deadline bounds a wait without progress
			r.armed = true
		}
		return false
	}
	return true
}
