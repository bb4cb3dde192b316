package gust

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Netpoll mode (Options.Netpoll): a connection that has read every byte it
// was sent, at a frame boundary, gives up its goroutine as well as its read
// buffer. It is parked on gust's own epoll instance, and the loop that waits
// on it starts a goroutine for the connection when bytes arrive again; that
// goroutine reads and dispatches until the connection is idle once more, and
// exits. An idle connection then costs its Conn and its socket, and nothing
// else. The parser is the one goroutine mode uses: a frame that arrives in
// pieces is read by a goroutine that waits for the rest, as in goroutine mode.

// epollET is EPOLLET as the uint32 of EpollEvent.Events (the syscall
// package's constant is a negative int).
const epollET = 1 << 31

// Conn states in netpoll mode.
const (
	npRunning int32 = iota // a goroutine reads the connection, or will
	npParked               // armed in the poller; no goroutine
)

// netpollState is a Conn's part in netpoll mode.
type netpollState struct {
	fd    int
	state atomic.Int32
	ready atomic.Bool // the loop saw the socket turn readable since the last resume
	gen   uint64      // the poller generation c is registered with; owned by the running goroutine

	timerMu  sync.Mutex
	timer    *time.Timer  // wakes a parked connection at its read deadline
	deadline atomic.Int64 // that deadline in Unix nanoseconds, 0 for none
}

// initNetpoll puts c in netpoll mode when Options.Netpoll asks for it and
// its connection has a descriptor gust can wait on (TCP and Unix sockets,
// not TLS or HTTP/2 streams).
func (c *Conn) initNetpoll() {
	if !c.cfg.Netpoll || c.idle == nil {
		return
	}
	fd := -1
	if err := c.idle.raw.Control(func(d uintptr) { fd = int(d) }); err != nil || fd < 0 {
		return
	}
	c.np = &netpollState{fd: fd}
}

// park hands c to the event loop, and reports whether the calling goroutine
// must go on serving it instead: bytes arrived while it was parking, its
// read deadline passed, or it could not be registered (its socket is
// closed, which the next read reports). Otherwise the calling goroutine must
// not touch c again.
//
// The descriptor is registered once, edge-triggered: the loop sees each
// arrival of bytes, sets ready, and resumes c if it is parked. A parking
// goroutine that finds ready set takes c back, so that bytes which came
// between its last read and the park are not left waiting, and no system
// call re-arms the descriptor at each park.
func (c *Conn) park() bool {
	np := c.np
	if err := thePoller.register(c); err != nil {
		return true // still running: the next read reports why
	}
	np.state.Store(npParked)
	// Whatever came while this goroutine was on its way here found c
	// running and did not resume it: bytes (ready), a socket closed by
	// CloseNow or a cut (epoll drops it without an event), a read deadline
	// whose timer fired.
	d := np.deadline.Load()
	missed := np.ready.Swap(false) || c.netDone.Load() || (d != 0 && time.Now().UnixNano() >= d)
	return missed && np.state.CompareAndSwap(npParked, npRunning)
}

// resume serves a parked connection again, on a goroutine the event loop
// (or whatever woke it) started for it.
func (c *Conn) resume() {
	c.np.ready.Store(false) // the reads below see whatever made it ready
	c.serve(false)
}

// wake resumes c if it is parked, on a goroutine of its own: a read then
// reports whatever ended or woke it (a closed socket, a read deadline).
func (c *Conn) wake() {
	if np := c.np; np != nil && np.state.CompareAndSwap(npParked, npRunning) {
		go c.resume()
	}
}

// wakeAt arranges for c to be woken at t, when a read deadline passes
// while it is parked (the runtime enforces deadlines only on reads that
// wait).
func (c *Conn) wakeAt(t time.Time) {
	np := c.np
	if np == nil {
		return
	}
	np.timerMu.Lock()
	defer np.timerMu.Unlock()
	if np.timer != nil {
		np.timer.Stop()
		np.timer = nil
	}
	if t.IsZero() {
		np.deadline.Store(0)
		return
	}
	np.deadline.Store(t.UnixNano())
	np.timer = time.AfterFunc(time.Until(t), c.wake)
}

// unpark takes c out of the poller when it ends (if it is in netpoll
// mode); the running goroutine calls it before the socket is closed.
func (c *Conn) unpark() {
	if c.np == nil {
		return
	}
	c.wakeAt(time.Time{}) // stops the deadline's timer
	thePoller.remove(c)
}

// poller is gust's epoll instance and the one loop that waits on it. It
// starts with the first parked connection and stops once no connection
// uses it, so that no goroutine outlives the connections.
type poller struct {
	mu      sync.Mutex
	epfd    int
	wakefd  int // an eventfd that ends the loop's wait when the last connection leaves
	running bool
	gen     atomic.Uint64 // counts the epoll instances started
	conns   map[int]*Conn // by descriptor: the connections in netpoll mode
}

var thePoller = poller{conns: make(map[int]*Conn)}

// register adds c's descriptor to the running epoll instance, once per
// instance: a connection keeps its registration until it ends, unless the
// instance fails and a new one starts (a new generation).
func (p *poller) register(c *Conn) error {
	np := c.np
	if np.gen != 0 && np.gen == p.gen.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		if err := p.startLocked(); err != nil {
			return err
		}
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(np.fd)}
	// The descriptor is used under the socket's own reference, so that
	// it cannot be closed and reused for another connection meanwhile.
	var err error
	cerr := c.idle.raw.Control(func(d uintptr) {
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(d), &ev)
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.conns[np.fd] = c
	np.gen = p.gen.Load()
	return nil
}

// remove forgets c; the loop stops when it was the last connection.
func (p *poller) remove(c *Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := c.np.fd
	if p.conns[fd] != c {
		return
	}
	delete(p.conns, fd)
	if p.running {
		c.idle.raw.Control(func(d uintptr) {
			syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(d), nil)
		})
		if len(p.conns) == 0 {
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
// connection is resumed, and parks again on a new one (register adds it
// anew: a new instance is a new generation).
func (p *poller) fail(epfd, wakefd int) {
	p.mu.Lock()
	p.running = false
	conns := make([]*Conn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	syscall.Close(epfd)
	syscall.Close(wakefd)
	for _, c := range conns {
		c.wake()
	}
}

// loop waits for readable connections and resumes each on a goroutine of
// its own. It never reads, parses or calls a callback itself, so nothing a
// connection does can hold up the others.
func (p *poller) loop(epfd, wakefd int) {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(epfd, events, -1)
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
			if c := p.conns[fd]; c != nil {
				c.np.ready.Store(true)
				c.wake()
			}
		}
		if len(p.conns) == 0 {
			p.running = false
			p.mu.Unlock()
			syscall.Close(epfd)
			syscall.Close(wakefd)
			return
		}
		p.mu.Unlock()
	}
}
