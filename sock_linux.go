package gust

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// In netpoll mode a connection's socket is gust's own: once the handshake
// is done, its descriptor is duplicated and the *net.TCPConn (or
// *net.UnixConn) is closed, so that only gust's event loop waits on the
// socket. The runtime's netpoller no longer holds it: no second wake-up at
// each readable event, and none of the net package's per-connection objects
// (the netFD, its poll descriptor, the two addresses), which are most of an
// idle connection's memory after the Conn itself.
//
// A sock is a net.Conn and a syscall.Conn. What waits on it (a goroutine
// writing into a full socket, a streamed message's handler reading) is
// woken by the connection's event loop, which watches the descriptor for
// both directions, edge-triggered.

// sock.use: the low bits count the calls using the descriptor; sockClosed
// is set by Close, and the descriptor is closed when the count drops to 0.
const (
	sockClosed  = 1 << 62
	sockDestroy = 1 << 61
)

// sock is a connected socket that gust's event loops wait on.
type sock struct {
	fd   int
	use  atomic.Int64             // sockClosed | number of calls using fd
	seq  [2]atomic.Uint32         // readiness events seen, per direction
	dl   [2]atomic.Int64          // read and write deadlines in Unix nanoseconds, 0 for none
	w    atomic.Pointer[sockWait] // set once a call has waited
	addr [2]netip.AddrPort        // local and remote, for TCP
	unix *[2]net.Addr             // local and remote, for a Unix socket
}

// sockWait is where calls that wait on a sock block; a connection whose
// calls never wait does not have one.
type sockWait struct {
	mu sync.Mutex
	ch [2]chan struct{} // closed to wake the calls waiting in a direction
}

// adoptSocket gives c a socket of gust's own in place of its *net.TCPConn
// or *net.UnixConn, registered with an event loop: netpoll mode (c.np).
// Any other connection (TLS, an HTTP/2 stream, a wrapper) stays in
// goroutine mode, and so does one whose descriptor cannot be duplicated or
// registered. The socket, the netpoll state, the idle reader and the raw
// writer are one allocation.
func (c *Conn) adoptSocket() {
	if !c.cfg.Netpoll {
		return
	}
	np := new(netpollState)
	switch nc := c.conn.(type) {
	case *net.TCPConn:
		la, _ := nc.LocalAddr().(*net.TCPAddr)
		ra, _ := nc.RemoteAddr().(*net.TCPAddr)
		if la == nil || ra == nil {
			return
		}
		np.addr = [2]netip.AddrPort{la.AddrPort(), ra.AddrPort()}
	case *net.UnixConn:
		np.unix = &[2]net.Addr{nc.LocalAddr(), nc.RemoteAddr()}
	default:
		return
	}
	raw, err := c.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return
	}
	fd := -1
	cerr := raw.Control(func(d uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, d, syscall.F_DUPFD_CLOEXEC, 0)
		if errno == 0 {
			fd = int(r)
		}
	})
	if cerr != nil || fd < 0 {
		return
	}
	np.fd, np.p = fd, pollerFor(fd)
	orig := c.conn
	c.conn, c.np = &np.sock, np
	if err := np.p.register(c); err != nil {
		syscall.Close(fd)
		c.conn, c.np = orig, nil
		return
	}
	// The duplicate shares the socket and its O_NONBLOCK; closing the
	// original takes it out of the runtime's netpoller.
	orig.Close()
	np.ir.size = max(c.cfg.ReadBufferSize, minReadBufferSize)
	np.rw.c = c
	c.idle, c.rw = &np.ir, &np.rw
}

// acquire counts a call that uses the descriptor; it fails once the sock is
// closed.
func (s *sock) acquire() bool {
	for {
		v := s.use.Load()
		if v&sockClosed != 0 {
			return false
		}
		if s.use.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// release ends a call acquire counted; the last one after Close closes the
// descriptor.
func (s *sock) release() {
	if s.use.Add(-1) == sockClosed {
		s.destroy()
	}
}

func (s *sock) destroy() {
	if s.use.CompareAndSwap(sockClosed, sockClosed|sockDestroy) {
		syscall.Close(s.fd) // which takes it out of the epoll instance
	}
}

// Close closes the socket. Calls waiting on it return net.ErrClosed; the
// descriptor is closed once no call uses it.
func (s *sock) Close() error {
	for {
		v := s.use.Load()
		if v&sockClosed != 0 {
			return s.opError("close", net.ErrClosed)
		}
		if s.use.CompareAndSwap(v, v|sockClosed) {
			break
		}
	}
	s.notify(dirRead)
	s.notify(dirWrite)
	if s.use.Load() == sockClosed {
		s.destroy()
	}
	return nil
}

// event is called by the event loop when the socket turned ready in dir.
func (s *sock) event(dir int) {
	s.seq[dir].Add(1)
	s.notify(dir)
}

// notify wakes the calls waiting in dir, if any, to look again: at a
// readiness event, a change of deadline, or Close.
func (s *sock) notify(dir int) {
	w := s.w.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	if ch := w.ch[dir]; ch != nil {
		close(ch)
		w.ch[dir] = nil
	}
	w.mu.Unlock()
}

// wait blocks until the socket may be ready in dir (an event came after
// seq was read), its deadline passes, or it is closed; the caller then
// tries again.
func (s *sock) wait(dir int, seq uint32) {
	w := s.w.Load()
	if w == nil {
		s.w.CompareAndSwap(nil, new(sockWait))
		w = s.w.Load()
	}
	w.mu.Lock()
	if s.seq[dir].Load() != seq || s.use.Load()&sockClosed != 0 {
		w.mu.Unlock()
		return
	}
	dl := s.dl[dir].Load()
	var d time.Duration
	if dl != 0 {
		if d = time.Until(time.Unix(0, dl)); d <= 0 {
			w.mu.Unlock()
			return
		}
	}
	ch := w.ch[dir]
	if ch == nil {
		ch = make(chan struct{})
		w.ch[dir] = ch
	}
	w.mu.Unlock()
	if dl == 0 {
		<-ch
		return
	}
	t := time.NewTimer(d)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
}

// fdOp is a call on a descriptor that reports whether it is done, or
// must wait for the socket to turn ready (an idle read, a raw write, a
// RawConn's function).
type fdOp interface{ onFD(fd uintptr) bool }

// fdFunc is a RawConn's function as an fdOp.
type fdFunc func(fd uintptr) bool

func (f fdFunc) onFD(fd uintptr) bool { return f(fd) }

// do calls op with the descriptor until it reports done, waiting for the
// socket to turn ready in dir in between; it fails when the sock is closed
// or the direction's deadline has passed, before or while it waits.
func (s *sock) do(dir int, op fdOp) error {
	for {
		if dl := s.dl[dir].Load(); dl != 0 && time.Now().UnixNano() >= dl {
			return os.ErrDeadlineExceeded
		}
		seq := s.seq[dir].Load()
		if !s.acquire() {
			return net.ErrClosed
		}
		done := op.onFD(uintptr(s.fd))
		s.release()
		if done {
			return nil
		}
		s.wait(dir, seq)
	}
}

// Read reads from the socket, waiting for bytes until the read deadline.
func (s *sock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	err := s.do(dirRead, fdFunc(func(fd uintptr) bool {
		var again bool
		n, again, rerr = readFD(int(fd), p)
		return !again
	}))
	if err == nil {
		err = rerr
	}
	switch {
	case err == io.EOF:
		return 0, io.EOF
	case err != nil:
		return 0, s.opError("read", err)
	}
	return n, nil
}

// Write writes p whole, waiting for room until the write deadline.
func (s *sock) Write(p []byte) (int, error) {
	var n int
	var werr error
	err := s.do(dirWrite, fdFunc(func(fd uintptr) bool {
		k, again, err := writeFD(int(fd), p[n:])
		n, werr = n+k, err
		return !again
	}))
	if err == nil {
		err = werr
	}
	if err != nil {
		return n, s.opError("write", err)
	}
	return n, nil
}

// CloseWrite shuts down the writing side of the socket.
func (s *sock) CloseWrite() error {
	if !s.acquire() {
		return s.opError("close", net.ErrClosed)
	}
	defer s.release()
	if err := syscall.Shutdown(s.fd, syscall.SHUT_WR); err != nil {
		return s.opError("close", os.NewSyscallError("shutdown", err))
	}
	return nil
}

// LocalAddr returns the local address: a *net.TCPAddr made at each call,
// or the *net.UnixAddr the socket had.
func (s *sock) LocalAddr() net.Addr { return s.netAddr(0) }

// RemoteAddr returns the peer's address, as LocalAddr does.
func (s *sock) RemoteAddr() net.Addr { return s.netAddr(1) }

func (s *sock) netAddr(i int) net.Addr {
	if s.unix != nil {
		return s.unix[i]
	}
	return net.TCPAddrFromAddrPort(s.addr[i])
}

func (s *sock) network() string {
	if s.unix != nil {
		return "unix"
	}
	return "tcp"
}

func (s *sock) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: s.network(), Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// SetDeadline sets both deadlines.
func (s *sock) SetDeadline(t time.Time) error {
	s.setDeadline(dirRead, t)
	s.setDeadline(dirWrite, t)
	return nil
}

// SetReadDeadline sets the deadline of reads, the ones waiting included.
func (s *sock) SetReadDeadline(t time.Time) error { s.setDeadline(dirRead, t); return nil }

// SetWriteDeadline sets the deadline of writes, the ones waiting included.
func (s *sock) SetWriteDeadline(t time.Time) error { s.setDeadline(dirWrite, t); return nil }

func (s *sock) setDeadline(dir int, t time.Time) {
	var dl int64
	if !t.IsZero() {
		dl = t.UnixNano()
		if dl == 0 {
			dl = 1
		}
	}
	s.dl[dir].Store(dl)
	s.notify(dir)
}

// SyscallConn gives access to the descriptor; its Read and Write wait on
// gust's event loop.
func (s *sock) SyscallConn() (syscall.RawConn, error) { return (*rawSock)(s), nil }

// rawSock is a sock's syscall.RawConn.
type rawSock sock

func (r *rawSock) Control(f func(fd uintptr)) error {
	s := (*sock)(r)
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.release()
	f(uintptr(s.fd))
	return nil
}

func (r *rawSock) Read(f func(fd uintptr) bool) error {
	return (*sock)(r).do(dirRead, fdFunc(f))
}

func (r *rawSock) Write(f func(fd uintptr) bool) error {
	return (*sock)(r).do(dirWrite, fdFunc(f))
}
