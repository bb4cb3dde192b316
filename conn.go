package gust

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/pingwait"
)

// Conn is a WebSocket connection, on the server or the client side. Conns
// come from an Upgrader, a Server or Dial; a zero Conn is a closed one (its
// writes return net.ErrClosed, ReadLoop returns at once).
//
// Concurrency: ReadLoop must be called once, and it calls the Event methods
// from its own goroutine. Every Write method, the deadline setters and
// Close, CloseNow, Get and Set are safe to call from any goroutine at any
// time, and so is Ping, except from that goroutine (see Ping); writes are
// serialised inside the Conn. Writes made while the read goroutine is
// dispatching the bytes of one read (from the callbacks, or from other
// goroutines meanwhile) are corked and reach the network together before the
// next blocking read, so a callback that blocks for long delays them: hand
// slow work to another goroutine, or set Options.Parallel. In netpoll mode
// (Options.Netpoll) the Event methods are called from an event loop that
// serves many connections: there a callback that blocks holds up them all.
type Conn struct {
	conn        net.Conn
	cfg         *config
	handler     Event
	server      bool
	polled      bool // an event loop serves it (netpoll mode); set by attach
	subprotocol string
	values      atomic.Pointer[values] // Set's, made by the first
	deflate     *deflate.State         // nil unless permessage-deflate was negotiated

	rd *readState // owned by the read goroutine; see allocConn
	wr writeState
	tr transport // how its bytes move: chosen by attach, nil before

	started atomic.Bool
	trackAt int32      // its index in tracker.conns, under the tracker's lock
	closing closeState // how far it has got in ending, and why (close.go)

	pings pingwait.Set // Pings waiting for their pongs
	hb    *heartbeat   // its place in the heartbeats' wheel while ReadLoop runs, if Options.PingInterval is set

	parallel chan struct{}  // semaphore for parallel OnMessage calls
	inflight sync.WaitGroup // parallel OnMessage calls and the outbox writer

	tracker *tracker // the Upgrader's (or Server's) that made it; nil on a client
}

func newConn(nc net.Conn, cfg *config, h Event, server bool, buffered []byte, subprotocol string) *Conn {
	c := allocConn(cfg, h, server)
	c.attach(nc, buffered, subprotocol)
	return c
}

// allocConn makes a Conn, with its read state in the same allocation in
// goroutine mode; in netpoll mode an idle connection holds none (takeRead,
// putRead).
func allocConn(cfg *config, h Event, server bool) *Conn {
	if cfg.Netpoll {
		return &Conn{cfg: cfg, handler: h, server: server}
	}
	cr := &struct {
		c  Conn
		rd readState
	}{c: Conn{cfg: cfg, handler: h, server: server}}
	cr.c.rd, cr.rd.c = &cr.rd, &cr.c
	return &cr.c
}

// readStates holds the read states of parked connections (netpoll mode).
var readStates = sync.Pool{New: func() any { return new(readState) }}

// takeRead gives c a read state, if it has none; only the goroutine that
// reads c calls it.
func (c *Conn) takeRead() {
	if c.rd == nil {
		c.rd = readStates.Get().(*readState)
		c.rd.c = c
	}
}

// putRead gives c's read state back to the pool when it is idle; c is
// about to park. A TLS record in progress keeps it: its bound
// (messageLeft) counts from its first wait.
func (c *Conn) putRead() {
	rd := c.rd
	if rd == nil || !rd.idle() || c.tr.inRecord() {
		return
	}
	*rd = readState{}
	readStates.Put(rd)
	c.rd = nil
}

// newPendingConn makes the Conn OnRequest receives: closed until open gives
// it its connection (but for Get, Set and Delete), and holding nothing but
// its memory, so that a refused handshake simply drops it.
func newPendingConn(cfg *config, h Event) *Conn {
	c := allocConn(cfg, h, true)
	c.closing.pending() // WriteAsync and CloseNow refuse, as on a Conn that ended
	return c
}

// open gives a pending Conn its connection under the write lock, which
// every write takes before it looks at the fields, then opens it to writes.
func (c *Conn) open(nc net.Conn, buffered []byte, hs handshakeResult) {
	c.wr.mu.Lock()
	c.attach(nc, buffered, hs.subprotocol)
	if hs.deflate != nil {
		c.deflate = deflate.NewState(*hs.deflate, &c.cfg.deflate, true, &c.wr.mu)
	}
	c.wr.mu.Unlock()
	c.closing.opened()
}

// attach gives c its network connection and the bytes that came after the
// handshake.
func (c *Conn) attach(nc net.Conn, buffered []byte, subprotocol string) {
	c.conn, c.subprotocol = nc, subprotocol
	cfg := c.cfg
	if len(buffered) > 0 {
		c.takeRead()
		c.rd.buf = bufpool.Get(max(cfg.ReadBufferSize, len(buffered)))
		c.rd.w = copy(*c.rd.buf, buffered)
	}
	c.tr = c.chooseTransport()
	if cfg.Parallel > 0 {
		c.parallel = make(chan struct{}, cfg.Parallel)
	}
}

// ReadLoop reads and dispatches frames until the connection ends, then
// calls OnClose and returns. Call it once per Conn, in a goroutine of your
// choice (a net/http handler may simply call it). Calls after the first
// return at once; while the connection lives, such a call is a mistake
// (calling ReadLoop from OnOpen, or on a Conn a Server serves) and logs a
// Warn record (Options.Logger), and so does a call on a Conn whose
// handshake is in progress (from Upgrader.OnRequest). On a zero Conn, or
// one that has ended, it returns at once without a word.
//
// In netpoll mode (Options.Netpoll) ReadLoop returns as soon as the
// connection has nothing to read: it calls OnOpen, dispatches what has
// arrived, and hands the connection to one of gust's event loops, which
// reads and dispatches from then on, and OnClose is called when it ends.
// A net/http handler then returns while the connection lives: its
// r.Context() is cancelled, an access log records the request as over,
// and code after ReadLoop runs at once. Read what you need from r before
// Upgrade (Conn.Set keeps it), and do what ends the connection in OnClose.
func (c *Conn) ReadLoop() {
	// A Conn without a connection returns before it counts as started, so
	// that a pending one still runs once it opens.
	if c.conn == nil || !c.started.CompareAndSwap(false, true) {
		if c.cfg != nil && (c.conn == nil || !c.closing.has(netClosed)) {
			msg := "gust: ReadLoop called while it runs: it runs once per Conn, and this call returned at once"
			if c.conn == nil {
				msg = "gust: ReadLoop called before the connection is open (from Upgrader.OnRequest?): this call returned at once"
			}
			c.cfg.logger().LogAttrs(context.Background(), slog.LevelWarn, msg, c.remoteAttr())
		}
		return
	}
	c.takeRead()
	c.opened()
	c.startHeartbeat()
	c.serve(true)
}

// opened reports the start to Options.Metrics, once (whoever set started).
func (c *Conn) opened() {
	if m := c.cfg.Metrics; m != nil {
		m.Opened(c)
	}
}

// NetConn returns the underlying connection. Reading from or writing to it
// corrupts the WebSocket stream; it is there for deadlines, addresses and
// TLS state. In netpoll mode it is gust's own socket, not the *net.TCPConn
// the handshake came on (see Options.Netpoll), whose SyscallConn reaches
// the descriptor; or the *tls.Conn, over that socket.
func (c *Conn) NetConn() net.Conn { return c.conn }

// RemoteAddr returns the peer's network address (nil on a zero Conn).
func (c *Conn) RemoteAddr() net.Addr {
	if c.conn == nil {
		return nil
	}
	return c.conn.RemoteAddr()
}

// LocalAddr returns the local network address (nil on a zero Conn).
func (c *Conn) LocalAddr() net.Addr {
	if c.conn == nil {
		return nil
	}
	return c.conn.LocalAddr()
}

// Netpoll reports whether an event loop serves c (netpoll mode): false in
// goroutine mode, which is also where a connection Options.Netpoll could
// not move to a loop stays (TLS gust did not make, HTTP/2, the descriptor
// limit; see Metrics for how that is reported).
func (c *Conn) Netpoll() bool { return c.polled }

// Compressed reports whether permessage-deflate was negotiated.
func (c *Conn) Compressed() bool { return c.deflate != nil }

// Subprotocol returns the subprotocol the handshake selected, or "".
func (c *Conn) Subprotocol() string { return c.subprotocol }

// SetDeadline sets the read and write deadlines of the underlying
// connection. A read past the deadline ends the connection; so does a write,
// since a frame cut in the middle cannot be resumed.
func (c *Conn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.wr.setDeadline(t))
}

// SetReadDeadline sets the deadline for the next reads. For heartbeats,
// Options.PingInterval needs no deadline; one of your own must be extended
// in OnPing, OnPong and OnMessage.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.conn == nil {
		return errClosed
	}
	return c.setReadDeadline(t)
}

// setReadDeadline sets the socket's read deadline, and in netpoll mode
// wakes the connection at t if it is parked then.
func (c *Conn) setReadDeadline(t time.Time) error {
	if !c.polled {
		var u int64
		if !t.IsZero() {
			u = t.UnixNano()
		}
		c.rd.readDL.Store(u) // see boundMessage
	}
	err := c.conn.SetReadDeadline(t)
	c.wakeAt(t)
	return err
}

// SetWriteDeadline sets the deadline for writes; Options.WriteTimeout
// still bounds each write when it comes sooner. A zero t leaves only
// WriteTimeout.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.wr.setDeadline(t) }

// serve reads and dispatches until the connection ends, and ends it; in
// netpoll mode, until it has nothing to read, and then parks it. On an
// event loop (c.rd.loop), whatever would wait goes to a goroutine instead:
// the rest of a message streamed to its handler, writes the socket did not
// take, the end of the connection (loopEnds, the peer's close frame
// included). It reports whether a callback ran on the loop (Held).
func (c *Conn) serve(open bool) (called bool) {
	for {
		y, err := c.run(open)
		open = false
		called = called || c.rd.called
		switch y {
		case park:
			if (*loopConn)(c).park() {
				// Bytes came meanwhile, the socket was closed or the read
				// deadline passed: serve on, with a read that finds out.
				c.rd.drained = false
				continue
			}
			return called
		case handOff:
			c.rd.loop = false
			c.rd.shrink()
			go c.serveOffLoop()
			return called
		case handOffEnd:
			c.rd.loop = false
			c.rd.shrink() // the close frame, in a buffer its size
			ends.add(c, nil)
			return called
		}
		if c.rd.loop {
			c.rd.loop = false
			c.rd.releaseAll()
			ends.add(c, err)
			return called
		}
		c.end(err)
		return called
	}
}

// serveOffLoop serves on a goroutine of its own a connection an event loop
// handed over (handOff): it writes what the socket did not take on the
// loop, then reads on where the loop stopped, and parks again once idle.
func (c *Conn) serveOffLoop() {
	c.wr.mu.Lock()
	err := c.wr.failed(c.wr.backlogLocked())
	c.wr.mu.Unlock()
	if err != nil {
		c.end(err)
		return
	}
	c.serve(false)
}

// run calls OnOpen (when open is set) and reads until the connection ends
// or yields. A panic in a callback, unless Options.DisableRecovery is set,
// becomes a *PanicError, which end answers with 1011.
func (c *Conn) run(open bool) (y yield, err error) {
	if !c.cfg.DisableRecovery {
		defer func() {
			if p := recover(); p != nil {
				y, err = goOn, c.recovered(p)
			}
		}()
	}
	if open {
		c.handler.OnOpen(c)
	}
	return c.rd.frames()
}

// recovered logs the panic p of a callback and returns it as a
// *PanicError; the caller sends the 1011.
func (c *Conn) recovered(p any) error {
	pe := &PanicError{Value: p, Stack: debug.Stack()}
	c.cfg.logger().LogAttrs(context.Background(), slog.LevelError, "gust: panic in event handler",
		c.remoteAttr(), slog.Int("code", int(StatusInternalError)), slog.String("panic", fmt.Sprint(p)),
		slog.String("stack", string(pe.Stack)))
	return pe
}
