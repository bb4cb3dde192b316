package netpoll

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// epollET is EPOLLET as the uint32 of EpollEvent.Events (the syscall
// package's constant is a negative int).
const epollET = 1 << 31

// ErrNotSocket is Adopt's error for a connection that is neither a
// *net.TCPConn nor a *net.UnixConn.
var ErrNotSocket = errors.New("netpoll: not a TCP or Unix socket")

// Adopt makes a Sock of nc, a *net.TCPConn or *net.UnixConn, with a
// duplicate of its descriptor. The caller gives the Sock to its Owner and
// registers it (Register), then closes nc, which takes the socket out of
// the runtime's netpoller; if Register fails, it closes the Sock instead
// and nc is as it was.
func Adopt(nc net.Conn) (*Sock, error) {
	s := new(Sock)
	if !s.setAddrs(nc) {
		return nil, ErrNotSocket
	}
	raw, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	err = raw.Control(func(d uintptr) {
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
		return nil, err
	}
	s.fd = int32(fd)
	return s, nil
}

// poller is one of the event loops and its epoll instance. It starts with
// its first socket and stops once no socket uses it, so that no goroutine
// outlives the connections.
type poller struct {
	mu      sync.Mutex
	epfd    int
	wakefd  int // an eventfd that ends the loop's wait when the last socket leaves
	running bool
	gen     atomic.Uint32 // counts the epoll instances started
	owners  []Owner       // by slot (descriptor / number of loops)
	n       int           // how many owners it holds
}

var pollers struct {
	once sync.Once
	p    []*poller
}

// pollerFor returns the event loop for descriptor fd: one of GOMAXPROCS
// loops (as it was at the first call), by descriptor.
func pollerFor(fd int) *poller {
	pollers.once.Do(func() {
		pollers.p = make([]*poller, runtime.GOMAXPROCS(0))
		for i := range pollers.p {
			pollers.p[i] = new(poller)
		}
	})
	return pollers.p[fd%len(pollers.p)]
}

// slot is descriptor fd's index in its poller's owners: the descriptors of
// one poller are those equal modulo the number of pollers.
func slot(fd int) int { return fd / len(pollers.p) }

func (s *Sock) poller() *poller { return pollerFor(int(s.fd)) }

// Conns reports how many sockets the event loops hold.
func Conns() int {
	n := 0
	for _, p := range pollers.p {
		p.mu.Lock()
		n += p.n
		p.mu.Unlock()
	}
	return n
}

// InLoop reports whether s's event loop holds it: from Adopt to Remove.
func (s *Sock) InLoop() bool {
	p := s.poller()
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slot(int(s.fd))
	return i < len(p.owners) && p.owners[i] != nil && p.owners[i].Sock() == s
}

// Register adds s, for o, to its loop's running epoll instance, once per
// instance: a Sock keeps its registration until Remove, unless the instance
// fails and a new one starts (a new generation). A connection registers
// before each Park; it fails only when the socket is closed or a new epoll
// instance cannot start.
func (s *Sock) Register(o Owner) error {
	p := s.poller()
	if s.registered(p) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.addLocked(s); err != nil {
		return err
	}
	i := slot(int(s.fd))
	if i >= len(p.owners) {
		p.owners = append(p.owners, make([]Owner, i+1-len(p.owners))...)
	}
	if p.owners[i] == nil {
		p.n++
	}
	p.owners[i] = o
	return nil
}

// addLocked adds s's descriptor to the running epoll instance, starting
// one if none runs, unless it is registered with it already.
func (p *poller) addLocked(s *Sock) error {
	if !p.running {
		if err := p.startLocked(); err != nil {
			return err
		}
	}
	if s.registered(p) {
		return nil
	}
	gen := p.gen.Load()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET, Fd: s.fd}
	// The descriptor is used under the socket's count, so that it cannot
	// be closed and reused for another connection meanwhile.
	if !s.acquire() {
		return net.ErrClosed
	}
	err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(s.fd), &ev)
	s.release()
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	s.gen.Store(gen)
	return nil
}

// registered reports whether s's descriptor is in p's current epoll
// instance (registered with its generation; 0 is no generation).
func (s *Sock) registered(p *poller) bool {
	gen := s.gen.Load()
	return gen != 0 && gen == p.gen.Load()
}

// rejoin registers s with its loop's epoll instance again if the one it
// was registered with failed (fail), before a call waits on s: no event
// would come otherwise, from an instance that is gone.
func (s *Sock) rejoin() {
	p := s.poller()
	if s.registered(p) {
		return
	}
	p.mu.Lock()
	p.addLocked(s) // on failure the wait ends at the deadline, as it would have
	p.mu.Unlock()
}

// Remove takes s out of its loop, which stops when it was the last socket,
// and stops the timers that would wake its owner o. The connection calls it
// when it ends, before it closes s.
func (s *Sock) Remove(o Owner) {
	s.stopTimers()
	p := s.poller()
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := int(s.fd)
	i := slot(fd)
	if i >= len(p.owners) || p.owners[i] != o {
		return
	}
	p.owners[i] = nil
	p.n--
	if p.running {
		if s.acquire() { // a closed socket has left the epoll instance
			syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
			s.release()
		}
		if p.n == 0 {
			var one = [8]byte{1}
			syscall.Write(p.wakefd, one[:])
		}
	}
}

func (p *poller) startLocked() error {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	wfd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errno != 0 {
		syscall.Close(epfd)
		return os.NewSyscallError("eventfd2", errno)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(wfd)}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(wfd), &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(int(wfd))
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.epfd, p.wakefd, p.running = epfd, int(wfd), true
	p.gen.Add(1)
	go p.loop(epfd, int(wfd))
	return nil
}

// fail gives up an epoll instance that stopped working: every parked
// connection is woken, and parks again on a new one (Register adds it
// anew: a new instance is a new generation), and every call waiting on a
// socket rejoins the new one before it waits again.
func (p *poller) fail(epfd, wakefd int) {
	p.mu.Lock()
	p.running = false
	p.gen.Add(1) // every registration is stale: the next Register or rejoin starts an instance
	owners := make([]Owner, 0, p.n)
	for _, o := range p.owners {
		if o != nil {
			owners = append(owners, o)
		}
	}
	p.mu.Unlock()
	syscall.Close(epfd)
	syscall.Close(wakefd)
	for _, o := range owners {
		s := o.Sock()
		s.notify(dirRead)
		s.notify(dirWrite)
		o.Wake()
	}
}

// loop waits for readable sockets and serves each parked one in turn on
// this goroutine (Owner.Readable). A socket whose connection runs on a
// goroutine is only marked ready, for its Park to see.
func (p *poller) loop(epfd, wakefd int) {
	events := make([]syscall.EpollEvent, 128)
	var ready []Owner
	for {
		n, err := pollNow(epfd, events)
		if n == 0 && err == nil {
			n, err = syscall.EpollWait(epfd, events, -1)
		}
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			p.fail(epfd, wakefd)
			return
		}
		p.mu.Lock()
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == wakefd {
				var b [8]byte
				syscall.Read(wakefd, b[:])
				continue
			}
			i := slot(fd)
			if i >= len(p.owners) || p.owners[i] == nil {
				continue
			}
			o := p.owners[i]
			s := o.Sock()
			if ev.Events&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				s.event(dirWrite)
			}
			if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				// No event follows the peer's end: the reads must go on
				// until one finds it (PeerEnded).
				s.hup.Store(true)
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				s.ready.Store(true)
				if s.Unpark() {
					ready = append(ready, o)
				} else {
					s.event(dirRead)
				}
			}
		}
		if p.n == 0 {
			p.running = false
			p.mu.Unlock()
			syscall.Close(epfd)
			syscall.Close(wakefd)
			return
		}
		p.mu.Unlock()
		// One clock reading per connection served: the end of one turn is
		// the start of the next.
		start := time.Now()
		for i, o := range ready {
			user := o.Readable()
			ready[i] = nil
			end := time.Now()
			if d := end.Sub(start); d > HeldThreshold {
				o.Held(d, user)
				end = time.Now() // the report's own time is not the next turn's
			}
			start = end
		}
		ready = ready[:0]
	}
}

// pollNow takes the events already there, without waiting, as a raw
// system call (sys_linux.go says why): a loop kept busy finds events at
// each turn and does not mark its P as in a system call; only a loop with
// nothing to do waits, the usual way.
func pollNow(epfd int, events []syscall.EpollEvent) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd),
		uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
