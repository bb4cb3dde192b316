package netpoll

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Sock.use: the low bits count the calls using the descriptor; sockClosed
// is set by Close, and the descriptor is closed when the count drops to 0.
const (
	sockClosed  = 1 << 62
	sockDestroy = 1 << 61
)

// Sock is a connected socket that an event loop waits on, and its state on
// the loop, in 104 bytes. It is a net.Conn and a syscall.Conn; Adopt makes
// one.
type Sock struct {
	use   atomic.Int64          // sockClosed | number of calls using fd
	dl    [2]atomic.Int64       // read and write deadlines in Unix nanoseconds, 0 for none
	seq   [2]atomic.Uint32      // readiness events seen, per direction
	w     atomic.Pointer[waits] // made by the first call that waits, or the first timer
	addrs *[2]net.Addr          // local and remote, when addr cannot hold them (Unix sockets, IPv6 zones)
	fd    int32

	// On the event loop.
	state atomic.Int32  // running or parked
	ready atomic.Bool   // the loop saw the socket turn readable since the last Resumed
	hup   atomic.Bool   // the loop saw the peer's end (PeerEnded)
	gen   atomic.Uint32 // the epoll instance (loop generation) the descriptor is registered with

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

// setAddrs takes the addresses of nc, a *net.TCPConn or a *net.UnixConn;
// it reports false for any other.
func (s *Sock) setAddrs(nc net.Conn) bool {
	switch nc := nc.(type) {
	case *net.TCPConn:
		la, _ := nc.LocalAddr().(*net.TCPAddr)
		ra, _ := nc.RemoteAddr().(*net.TCPAddr)
		if la == nil || ra == nil {
			return false
		}
		if la.Zone != "" || ra.Zone != "" {
			s.addrs = &[2]net.Addr{la, ra}
		} else {
			s.addr = [2]tcpAddr{newTCPAddr(la.AddrPort()), newTCPAddr(ra.AddrPort())}
		}
	case *net.UnixConn:
		s.addrs = &[2]net.Addr{nc.LocalAddr(), nc.RemoteAddr()}
	default:
		return false
	}
	return true
}

// acquire counts a call that uses the descriptor; it fails once the sock is
// closed.
func (s *Sock) acquire() bool {
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
func (s *Sock) release() {
	if s.use.Add(-1) == sockClosed {
		s.destroy()
	}
}

func (s *Sock) destroy() {
	if s.use.CompareAndSwap(sockClosed, sockClosed|sockDestroy) {
		closeFD(int(s.fd)) // which takes it out of the epoll instance
	}
}

// Close closes the socket. Calls waiting on it return net.ErrClosed; the
// descriptor is closed once no call uses it.
func (s *Sock) Close() error {
	for {
		v := s.use.Load()
		if v&sockClosed != 0 {
			return s.OpError("close", net.ErrClosed)
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
func (s *Sock) event(dir int) {
	s.seq[dir].Add(1)
	s.notify(dir)
}

// notify wakes the calls waiting in dir, if any, to look again: at a
// readiness event, a change of deadline, or Close.
func (s *Sock) notify(dir int) {
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
func (s *Sock) wait(dir int, seq uint32) {
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
func (s *Sock) do(dir int, try bool, f func(fd int) bool) (bool, error) {
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
func (s *Sock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, err := s.ReadSome(p, false)
	switch {
	case err == io.EOF:
		return 0, io.EOF
	case err != nil:
		return 0, s.OpError("read", err)
	}
	return n, nil
}

// Write writes p whole, waiting for room until the write deadline.
func (s *Sock) Write(p []byte) (int, error) {
	n, _, err := s.WriteSome(p, false, nil)
	if err != nil {
		return n, s.OpError("write", err)
	}
	return n, nil
}

// ReadSome reads once into p, waiting for bytes unless try is set; with
// try set, again reports that nothing had arrived. Its errors are the
// system call's (io.EOF for the peer's end), net.ErrClosed or
// os.ErrDeadlineExceeded, not wrapped (OpError wraps them).
func (s *Sock) ReadSome(p []byte, try bool) (n int, again bool, err error) {
	var rerr error
	done, err := s.do(dirRead, try, func(fd int) bool {
		var again bool
		n, again, rerr = ReadFD(fd, p)
		return !again
	})
	if err == nil {
		err = rerr
	}
	return n, !done && err == nil, err
}

// WriteSome writes p whole, or with try set what the socket takes at once.
// arm, if set, is called once before the first wait, and reports whether
// it set a deadline for it (armed: the caller puts the deadline back). Its
// errors are not wrapped, as ReadSome's.
func (s *Sock) WriteSome(p []byte, try bool, arm func() bool) (n int, armed bool, err error) {
	var werr error
	_, err = s.do(dirWrite, try, func(fd int) bool {
		k, again, err := WriteFD(fd, p[n:])
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
func (s *Sock) CloseWrite() error {
	if !s.acquire() {
		return s.OpError("close", net.ErrClosed)
	}
	defer s.release()
	if err := shutdownWrite(int(s.fd)); err != nil {
		return s.OpError("close", err)
	}
	return nil
}

// LocalAddr returns the local address: a *net.TCPAddr made at each call,
// or the *net.UnixAddr the socket had.
func (s *Sock) LocalAddr() net.Addr { return s.netAddr(0) }

// RemoteAddr returns the peer's address, as LocalAddr does.
func (s *Sock) RemoteAddr() net.Addr { return s.netAddr(1) }

func (s *Sock) netAddr(i int) net.Addr {
	if s.addrs != nil {
		return s.addrs[i]
	}
	return net.TCPAddrFromAddrPort(s.addr[i].addrPort())
}

func (s *Sock) network() string {
	if s.addrs != nil {
		return s.addrs[0].Network()
	}
	return "tcp"
}

// OpError wraps err as the net package's connections do.
func (s *Sock) OpError(op string, err error) error {
	return &net.OpError{Op: op, Net: s.network(), Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// SetDeadline sets both deadlines.
func (s *Sock) SetDeadline(t time.Time) error {
	s.setDeadline(dirRead, t)
	s.setDeadline(dirWrite, t)
	return nil
}

// SetReadDeadline sets the deadline of reads, the ones waiting included.
func (s *Sock) SetReadDeadline(t time.Time) error { s.setDeadline(dirRead, t); return nil }

// SetWriteDeadline sets the deadline of writes, the ones waiting included.
func (s *Sock) SetWriteDeadline(t time.Time) error { s.setDeadline(dirWrite, t); return nil }

func (s *Sock) setDeadline(dir int, t time.Time) {
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
// the event loop.
func (s *Sock) SyscallConn() (syscall.RawConn, error) { return (*rawSock)(s), nil }

// rawSock is a Sock's syscall.RawConn.
type rawSock Sock

func (r *rawSock) Control(f func(fd uintptr)) error {
	s := (*Sock)(r)
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.release()
	f(uintptr(s.fd))
	return nil
}

func (r *rawSock) Read(f func(fd uintptr) bool) error {
	_, err := (*Sock)(r).do(dirRead, false, func(fd int) bool { return f(uintptr(fd)) })
	return err
}

func (r *rawSock) Write(f func(fd uintptr) bool) error {
	_, err := (*Sock)(r).do(dirWrite, false, func(fd int) bool { return f(uintptr(fd)) })
	return err
}
