package gust

import (
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Netpoll mode (Options.Netpoll): a connection that has read every byte it
// was sent gives up its goroutine as well as its read buffer. It is parked
// on one of gust's event loops (about one per GOMAXPROCS), each with its
// own epoll instance. When bytes arrive, the loop reads them into a pooled
// buffer, parses and dispatches them itself, and parks the connection
// again; the buffer goes back once drained. A frame that arrives in pieces
// is parsed as far as its bytes go, and the parser resumes there at the
// next readable event (readState keeps the frame in progress; a partial
// header or control frame is kept in a buffer its size). An idle
// connection then costs its Conn and its socket, and nothing else.
//
// A loop never waits. What would wait goes to a goroutine started for the
// connection (errHandoff), which serves it as goroutine mode does until it
// is idle again, and parks it: writes the socket did not take at once
// (netWriteBacklog), a message streamed to its handler (StreamThreshold),
// a close frame and the end of the connection, Options.Parallel's handlers
// all busy, the write lock held by another goroutine, and a peer that
// keeps sending or a message that takes long to inflate (loopWorkBudget).

// epollET is EPOLLET as the uint32 of EpollEvent.Events (the syscall
// package's constant is a negative int).
const epollET = 1 << 31

// Conn states in netpoll mode.
const (
	npRunning int32 = iota // a goroutine reads the connection, or will
	npParked               // armed in the poller; no goroutine
)

// netpollState is a Conn's part in netpoll mode: its socket (c.conn) and
// its place on an event loop, in one allocation.
type netpollState struct{ sock }

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
	c.rd.shrink()
	if left, ok := c.messageLeft(); ok && !c.rd.armed {
		// The message in progress has its bound (Options.MessageTimeout):
		// wake c then. Left in place once the message ends, a wake-up for
		// an earlier message finds nothing overdue and parks c again.
		c.wakeForMessage(left)
		c.rd.armed = true
	}
	if err := np.poller().register(c); err != nil {
		return true // still running: the next read reports why
	}
	// Once parked, c may be resumed on another goroutine at once: its read
	// state goes back before.
	c.putRead()
	if h := parkHook.Load(); h != nil {
		(*h)(c, c.rd != nil)
	}
	np.state.Store(npParked)
	// Whatever came while this goroutine was on its way here found c
	// running and did not resume it: bytes (ready), a socket closed by
	// CloseNow or a cut (epoll drops it without an event), a read deadline
	// whose timer fired.
	d := np.dl[dirRead].Load() // the read deadline
	missed := np.ready.Swap(false) || c.closing.has(netClosed) || (d != 0 && time.Now().UnixNano() >= d)
	if missed && np.state.CompareAndSwap(npParked, npRunning) {
		c.takeRead()
		return true
	}
	return false
}

// peerEnded reports whether the event loop has seen the peer's end (an
// event with RDHUP, HUP or ERR) on np, nil for none.
func (np *netpollState) peerEnded() bool { return np != nil && np.hup.Load() }

// parkHook is nil but in tests (export_linux_test.go): it is called by each
// connection that parks, with whether it keeps its read state.
var parkHook atomic.Pointer[func(c *Conn, holdsRead bool)]

// resume serves a parked connection again, on a goroutine the event loop
// (or whatever woke it) started for it.
func (c *Conn) resume() {
	c.np.ready.Store(false) // the reads below see whatever made it ready
	c.takeRead()
	c.rd.armed = false // the wake-up may have been the message's bound: the next park sets it again
	c.rd.loop = false
	c.serve(false)
}

// resumeOnLoop serves a parked connection on its event loop, which found
// it readable.
func (c *Conn) resumeOnLoop() {
	c.np.ready.Store(false)
	c.takeRead()
	c.rd.startTurn()
	c.serve(false)
}

// wake resumes c if it is parked, on a goroutine of its own: a read then
// reports whatever ended or woke it (a closed socket, a read deadline).
func (c *Conn) wake() {
	if np := c.np; np != nil && np.state.CompareAndSwap(npParked, npRunning) {
		go c.resume()
	}
}

// wakeForMessage arranges for c to be woken after d, when the message in
// progress reaches its bound (Options.MessageTimeout).
func (c *Conn) wakeForMessage(d time.Duration) {
	w := c.np.waits()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.msg == nil {
		w.msg = time.AfterFunc(d, c.wake)
	} else {
		w.msg.Reset(d)
	}
}

// wakeAt arranges for c to be woken at t, when a read deadline passes
// while it is parked (the socket enforces deadlines only on calls that
// wait).
func (c *Conn) wakeAt(t time.Time) {
	np := c.np
	if np == nil {
		return
	}
	w := np.w.Load()
	if w == nil {
		if t.IsZero() {
			return
		}
		w = np.waits()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case t.IsZero():
		if w.timer != nil {
			w.timer.Stop()
		}
	case w.timer == nil:
		w.timer = time.AfterFunc(time.Until(t), c.wake)
	default:
		w.timer.Reset(time.Until(t))
	}
}

// poller returns the event loop of s's descriptor.
func (s *sock) poller() *poller { return pollerFor(int(s.fd)) }

// unpark takes c out of the poller when it ends (if it is in netpoll
// mode); the running goroutine calls it before the socket is closed.
func (c *Conn) unpark() {
	if c.np == nil {
		return
	}
	if w := c.np.w.Load(); w != nil { // stops the timers that would wake it
		w.mu.Lock()
		if w.timer != nil {
			w.timer.Stop()
		}
		if w.msg != nil {
			w.msg.Stop()
		}
		w.mu.Unlock()
	}
	c.np.poller().remove(c)
}

// poller is one of gust's event loops and its epoll instance. It starts
// with its first parked connection and stops once no connection uses it, so
// that no goroutine outlives the connections.
type poller struct {
	mu      sync.Mutex
	epfd    int
	wakefd  int // an eventfd that ends the loop's wait when the last connection leaves
	running bool
	gen     atomic.Uint32 // counts the epoll instances started
	conns   []*Conn       // by slot (descriptor / number of loops): the connections in netpoll mode
	n       int           // how many conns holds
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

// slot is descriptor fd's index in its poller's conns: the descriptors of
// one poller are those equal modulo the number of pollers.
func slot(fd int) int { return fd / len(pollers.p) }

// register adds c's descriptor to the running epoll instance, once per
// instance: a connection keeps its registration until it ends, unless the
// instance fails and a new one starts (a new generation).
func (p *poller) register(c *Conn) error {
	np := c.np
	if np.registered(p) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.addLocked(&np.sock); err != nil {
		return err
	}
	i := slot(int(np.fd))
	if i >= len(p.conns) {
		p.conns = append(p.conns, make([]*Conn, i+1-len(p.conns))...)
	}
	if p.conns[i] == nil {
		p.n++
	}
	p.conns[i] = c
	return nil
}

// addLocked adds s's descriptor to the running epoll instance, starting
// one if none runs, unless it is registered with it already.
func (p *poller) addLocked(s *sock) error {
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
func (s *sock) registered(p *poller) bool {
	gen := s.gen.Load()
	return gen != 0 && gen == p.gen.Load()
}

// rejoin registers s with its poller's epoll instance again if the one it
// was registered with failed (fail), before a call waits on s: no event
// would come otherwise, from an instance that is gone.
func (s *sock) rejoin() {
	p := s.poller()
	if s.registered(p) {
		return
	}
	p.mu.Lock()
	p.addLocked(s) // on failure the wait ends at the deadline, as it would have
	p.mu.Unlock()
}

// remove forgets c; the loop stops when it was the last connection.
func (p *poller) remove(c *Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := int(c.np.fd)
	i := slot(fd)
	if i >= len(p.conns) || p.conns[i] != c {
		return
	}
	p.conns[i] = nil
	p.n--
	if p.running {
		if np := c.np; np.acquire() { // a closed socket has left the epoll instance
			syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
			np.release()
		}
		if p.n == 0 {
			var one = [8]byte{1}
			syscall.Write(p.wakefd, one[:])
		}
	}
}

// count reports how many connections p holds.
func (p *poller) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
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
// anew: a new instance is a new generation), and every call waiting on a
// socket rejoins the new one before it waits again.
func (p *poller) fail(epfd, wakefd int) {
	p.mu.Lock()
	p.running = false
	p.gen.Add(1) // every registration is stale: the next register or rejoin starts an instance
	conns := make([]*Conn, 0, p.n)
	for _, c := range p.conns {
		if c != nil {
			conns = append(conns, c)
		}
	}
	p.mu.Unlock()
	syscall.Close(epfd)
	syscall.Close(wakefd)
	for _, c := range conns {
		// Calls waiting on the socket look again, and rejoin a new
		// instance before they wait; a parked connection is resumed.
		c.np.notify(dirRead)
		c.np.notify(dirWrite)
		c.wake()
	}
}

// loop waits for readable connections and serves each in turn: it reads,
// parses and dispatches what arrived, and parks the connection again
// (resumeOnLoop). A connection that is running elsewhere (on a goroutine)
// is only marked ready, for its park to see.
func (p *poller) loop(epfd, wakefd int) {
	events := make([]syscall.EpollEvent, 128)
	var ready []*Conn
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
			i := slot(fd)
			if i >= len(p.conns) {
				continue
			}
			c := p.conns[i]
			if c == nil {
				continue
			}
			if ev.Events&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				c.np.event(dirWrite)
			}
			if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				// No event follows the peer's end: the reads must go on
				// until one finds it (see tryRead).
				c.np.hup.Store(true)
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				c.np.ready.Store(true)
				if c.np.state.CompareAndSwap(npParked, npRunning) {
					ready = append(ready, c)
				} else {
					c.np.event(dirRead)
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
		for i, c := range ready {
			c.resumeOnLoop()
			ready[i] = nil
			end := time.Now()
			if d := end.Sub(start); d > loopHeldThreshold {
				c.noteLoopHeld(d)
				end = time.Now() // the report's own time is not the next turn's
			}
			start = end
		}
		ready = ready[:0]
	}
}
