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

	"github.com/gustws/gust/internal/bufpool"
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

// sock is a connected socket that gust's event loops wait on, and its
// connection's state on the loop: the whole of a Conn's part in netpoll
// mode (netpollState), in 112 bytes.
type sock struct {
	use   atomic.Int64              // sockClosed | number of calls using fd
	dl    [2]atomic.Int64           // read and write deadlines in Unix nanoseconds, 0 for none
	seq   [2]atomic.Uint32          // readiness events seen, per direction
	w     atomic.Pointer[sockWaits] // made by the first call that waits, or the first read deadline
	addrs *[2]net.Addr              // local and remote, when addr cannot hold them (Unix sockets, IPv6 zones)
	fd    int32

	// The connection on its event loop (netpollState).
	state atomic.Int32  // npRunning or npParked
	ready atomic.Bool   // the loop saw the socket turn readable since the last resume
	hup   atomic.Bool   // the loop saw the peer's end (RDHUP, HUP or ERR): a short read no longer means drained
	gen   atomic.Uint32 // the epoll instance (poller generation) the descriptor is registered with

	addr [2]tcpAddr // local and remote, for TCP
}

// tcpAddr is a TCP address without an IPv6 zone: netip.AddrPort's 32 bytes
// in 20.
type tcpAddr struct {
	ip   [16]byte
	port uint16
	v4   bool
}

func newTCPAddr(ap netip.AddrPort) tcpAddr {
	a := ap.Addr()
	return tcpAddr{ip: a.As16(), port: ap.Port(), v4: a.Is4()}
}

func (a *tcpAddr) addrPort() netip.AddrPort {
	ip := netip.AddrFrom16(a.ip)
	if a.v4 {
		ip = ip.Unmap()
	}
	return netip.AddrPortFrom(ip, a.port)
}

// sockWaits is where calls that wait on a sock block, and the timer that
// wakes its parked connection at its read deadline; a connection that never
// waits and has no read deadline does not have one.
type sockWaits struct {
	mu    sync.Mutex
	ch    [2]chan struct{} // closed to wake the calls waiting in a direction
	timer *time.Timer      // wakes the parked connection at its read deadline (wakeAt)
	msg   *time.Timer      // wakes it when the message in progress reaches its bound (wakeForMessage)
}

// waits returns s's sockWaits, made by the first call.
func (s *sock) waits() *sockWaits {
	if w := s.w.Load(); w != nil {
		return w
	}
	s.w.CompareAndSwap(nil, new(sockWaits))
	return s.w.Load()
}

// adoptSocket gives c a socket of gust's own in place of its *net.TCPConn
// or *net.UnixConn, registered with an event loop: netpoll mode (c.np).
// Any other connection (TLS, an HTTP/2 stream, a wrapper) stays in
// goroutine mode, and so does one whose descriptor cannot be duplicated or
// registered (at the descriptor limit, EMFILE), for its whole life: its
// net.Conn is in use from then on by any goroutine (writes, deadlines,
// NetConn's callers), and swapping it later would race with them. Either
// fallback is reported (noteFallback). The socket, the netpoll state, the
// idle reader and the raw writer are one allocation.
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
			c.noteFallback(netpollFallbackType, nil)
			return
		}
		if la.Zone != "" || ra.Zone != "" {
			np.addrs = &[2]net.Addr{la, ra}
		} else {
			np.addr = [2]tcpAddr{newTCPAddr(la.AddrPort()), newTCPAddr(ra.AddrPort())}
		}
	case *net.UnixConn:
		np.addrs = &[2]net.Addr{nc.LocalAddr(), nc.RemoteAddr()}
	default:
		c.noteFallback(netpollFallbackType, nil)
		return
	}
	raw, err := c.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		c.noteFallback(netpollFallbackFD, err)
		return
	}
	fd := -1
	var derr error
	err = raw.Control(func(d uintptr) {
		if h := dupHook.Load(); h != nil {
			if derr = (*h)(c); derr != nil {
				return
			}
		}
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, d, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			derr = os.NewSyscallError("fcntl", errno)
			return
		}
		fd = int(r)
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		c.noteFallback(netpollFallbackFD, err)
		return
	}
	np.fd = int32(fd)
	orig := c.conn
	c.conn, c.np = &np.sock, np
	if err := np.poller().register(c); err != nil {
		syscall.Close(fd)
		c.conn, c.np = orig, nil
		c.noteFallback(netpollFallbackFD, err)
		return
	}
	// The duplicate shares the socket and its O_NONBLOCK; closing the
	// original takes it out of the runtime's netpoller.
	orig.Close()
}

// dupHook is nil but in tests (export_linux_test.go): it is called before a
// connection's descriptor is duplicated, and an error it returns fails the
// duplication, as the descriptor limit would.
var dupHook atomic.Pointer[func(c *Conn) error]

// sockRead reads once from c's own socket (netpoll mode) into dst or, when
// dst is nil, into a pooled buffer it returns; with try set it does not
// wait, and again reports that there was nothing to read.
func (c *Conn) sockRead(dst []byte, try bool) (buf *[]byte, n int, again bool, err error) {
	if dst == nil {
		buf = bufpool.Get(c.idleReadSize())
		dst = *buf
	}
	n, done, err := c.np.read(dst, try)
	if err != nil || !done {
		bufpool.Put(buf)
		return nil, 0, !done && err == nil, err
	}
	return buf, n, false, nil
}

// sockWrite writes p to c's own socket (netpoll mode): what it takes at
// once when try is set, else all of it, waiting on the event loop under the
// write timeout, which is armed only for the wait (as rawWriter's).
func (c *Conn) sockWrite(p []byte, try bool) (int, error) {
	s := &c.np.sock
	n, armed, err := s.write(p, try, c.armWriteTimeout)
	if armed {
		s.setDeadline(dirWrite, c.userWriteDeadline())
	}
	if err != nil {
		return n, s.opError("write", err)
	}
	return n, nil
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
		syscall.Close(int(s.fd)) // which takes it out of the epoll instance
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
	w := s.waits()
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

// do calls f with the descriptor until it reports done, waiting for the
// socket to turn ready in dir in between; with try set it calls f once, and
// reports whether it was done. It fails when the sock is closed or the
// direction's deadline has passed, before or while it waits.
func (s *sock) do(dir int, try bool, f func(fd int) bool) (bool, error) {
	for {
		if dl := s.dl[dir].Load(); dl != 0 && time.Now().UnixNano() >= dl {
			return false, os.ErrDeadlineExceeded
		}
		seq := s.seq[dir].Load()
		if !s.acquire() {
			return false, net.ErrClosed
		}
		done := f(int(s.fd))
		s.release()
		if done || try {
			return done, nil
		}
		s.rejoin()
		s.wait(dir, seq)
	}
}

// Read reads from the socket, waiting for bytes until the read deadline.
func (s *sock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, err := s.read(p, false)
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
	n, _, err := s.write(p, false, nil)
	if err != nil {
		return n, s.opError("write", err)
	}
	return n, nil
}

// read is Read's one read, and netpoll mode's (sockRead): with try set it
// does not wait, and done reports whether there was anything to read. Its
// errors are the system call's or do's, unwrapped.
func (s *sock) read(p []byte, try bool) (n int, done bool, err error) {
	var rerr error
	done, err = s.do(dirRead, try, func(fd int) bool {
		var again bool
		n, again, rerr = readFD(fd, p)
		return !again
	})
	if err == nil {
		err = rerr
	}
	return n, done, err
}

// write is Write's loop, and netpoll mode's (sockWrite): it writes p whole,
// or with try set what the socket takes at once. arm, if set, is called
// once before the first wait, and reports whether it set a deadline for it
// (armed: the caller puts the deadline back).
func (s *sock) write(p []byte, try bool, arm func() bool) (n int, armed bool, err error) {
	var werr error
	_, err = s.do(dirWrite, try, func(fd int) bool {
		k, again, err := writeFD(fd, p[n:])
		n, werr = n+k, err
		if again && !try && !armed && arm != nil {
			armed = arm()
		}
		return !again
	})
	if err == nil {
		err = werr
	}
	return n, armed, err
}

// CloseWrite shuts down the writing side of the socket.
func (s *sock) CloseWrite() error {
	if !s.acquire() {
		return s.opError("close", net.ErrClosed)
	}
	defer s.release()
	if err := syscall.Shutdown(int(s.fd), syscall.SHUT_WR); err != nil {
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
	if s.addrs != nil {
		return s.addrs[i]
	}
	return net.TCPAddrFromAddrPort(s.addr[i].addrPort())
}

func (s *sock) network() string {
	if s.addrs != nil {
		return s.addrs[0].Network()
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
	_, err := (*sock)(r).do(dirRead, false, func(fd int) bool { return f(uintptr(fd)) })
	return err
}

func (r *rawSock) Write(f func(fd uintptr) bool) error {
	_, err := (*sock)(r).do(dirWrite, false, func(fd int) bool { return f(uintptr(fd)) })
	return err
}
