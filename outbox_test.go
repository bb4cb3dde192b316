package gust

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedConn is an in-memory net.Conn for outbox tests. Its writes wait at a
// gate until the test opens it, so that a writer is "blocked on the peer"
// exactly when the test wants; it records each write. Reads serve what the
// test sends, and end with io.EOF once the conn is closed.
type gatedConn struct {
	gate      chan struct{} // closed: writes go through
	entered   chan struct{} // one token per write started
	in        chan []byte
	closed    chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	writes [][]byte // a copy of each write
	first  []*byte  // the address of each write's first byte
	rest   []byte   // what Read has not served yet
}

func newGatedConn() *gatedConn {
	return &gatedConn{gate: make(chan struct{}), entered: make(chan struct{}, 1000),
		in: make(chan []byte, 10), closed: make(chan struct{})}
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.entered <- struct{}{}
	select {
	case <-g.gate:
	case <-g.closed:
		return 0, net.ErrClosed
	}
	g.mu.Lock()
	g.writes = append(g.writes, bytes.Clone(p))
	g.first = append(g.first, &p[0])
	g.mu.Unlock()
	return len(p), nil
}

func (g *gatedConn) Read(p []byte) (int, error) {
	if len(g.rest) == 0 {
		select {
		case g.rest = <-g.in:
		case <-g.closed:
			return 0, io.EOF
		}
	}
	n := copy(p, g.rest)
	g.rest = g.rest[n:]
	return n, nil
}

func (g *gatedConn) Close() error {
	g.closeOnce.Do(func() { close(g.closed) })
	return nil
}

func (g *gatedConn) open() { close(g.gate) }

// waitWrite waits until a write has started (and is held at the gate, if
// it is closed).
func (g *gatedConn) waitWrite(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no write started")
	}
}

// frames returns the frames written so far, and how many writes carried
// them.
func (g *gatedConn) frames(t *testing.T) ([]wireFrame, int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	fs, err := parseFrames(bytes.Join(g.writes, nil))
	require.NoError(t, err)
	return fs, len(g.writes)
}

func (g *gatedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (g *gatedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (g *gatedConn) SetDeadline(time.Time) error      { return nil }
func (g *gatedConn) SetReadDeadline(time.Time) error  { return nil }
func (g *gatedConn) SetWriteDeadline(time.Time) error { return nil }

// startGated runs a server Conn over a gatedConn, its read loop included.
func startGated(t *testing.T, opts *Options) (*Conn, *gatedConn, *recorder) {
	t.Helper()
	g := newGatedConn()
	h := newRecorder()
	var o Options
	if opts != nil {
		o = *opts
	}
	c := newConn(g, newConfig(o, true), h, true, nil, "")
	go c.ReadLoop()
	t.Cleanup(func() {
		g.Close()
		select {
		case <-h.closed:
		case <-time.After(5 * time.Second):
			t.Error("OnClose was not called")
		}
	})
	return c, g, h
}

// results collects done results by name.
type results struct {
	mu  sync.Mutex
	got map[string]error
}

func (r *results) done(name string) func(error) {
	return func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, twice := r.got[name]; twice {
			panic("done called twice for " + name)
		}
		r.got[name] = err
	}
}

func (r *results) snapshot() map[string]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]error, len(r.got))
	for k, v := range r.got {
		m[k] = v
	}
	return m
}

func payloads(fs []wireFrame) []string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f.payload))
	}
	return s
}

// The outbox writes what WriteAsync and WritePreparedAsync queue, in order:
// what was queued while a write was blocked goes out as one batch, in one
// system call, and a prepared message alone in its batch without a copy.
func TestOutboxWritesInOrder(t *testing.T) {
	c, g, _ := startGated(t, nil)
	pm, err := NewPreparedMessage(OpText, []byte("prepared"))
	require.NoError(t, err)
	r := &results{got: map[string]error{}}

	require.NoError(t, c.WritePreparedAsync(pm, r.done("p1")))
	g.waitWrite(t) // held: the next ones queue behind it
	require.NoError(t, c.WriteAsync(OpText, []byte("a"), r.done("a")))
	require.NoError(t, c.WritePreparedAsync(pm, r.done("p2")))
	require.NoError(t, c.WriteAsync(OpBinary, []byte("b"), nil))
	g.open()

	require.Eventually(t, func() bool { return len(r.snapshot()) == 3 }, 5*time.Second, time.Millisecond)
	require.Equal(t, map[string]error{"p1": nil, "a": nil, "p2": nil}, r.snapshot())
	fs, writes := g.frames(t)
	require.Equal(t, []string{"prepared", "a", "prepared", "b"}, payloads(fs))
	require.Equal(t, byte(0x82), fs[3].b0)
	require.Equal(t, 2, writes, "the first message, then the batch queued behind it")
	g.mu.Lock()
	require.Same(t, &pm.plain[0], g.first[0], "a prepared message alone in its batch is written without a copy")
	g.mu.Unlock()

	require.ErrorIs(t, c.WriteAsync(opPing, nil, nil), errBadOpcode)
	require.Error(t, c.WritePreparedAsync(nil, nil))
}

// Each policy, with an outbox of 2 behind a write that is blocked: two
// messages fill it, and a third meets the policy.
func TestOutboxPolicies(t *testing.T) {
	cases := []struct {
		policy  OutboxPolicy
		ret     error            // what the third call returns
		done    map[string]error // the done results once all is written
		written []string
	}{
		{OutboxReject, ErrQueueFull,
			map[string]error{"0": nil, "1": nil, "2": nil}, []string{"0", "1", "2"}},
		{OutboxDropNewest, nil,
			map[string]error{"0": nil, "1": nil, "2": nil, "3": ErrQueueFull}, []string{"0", "1", "2"}},
		{OutboxDropOldest, nil,
			map[string]error{"0": nil, "1": ErrQueueFull, "2": nil, "3": nil}, []string{"0", "2", "3"}},
		{OutboxPolicy(7), ErrQueueFull, // unknown: OutboxReject
			map[string]error{"0": nil, "1": nil, "2": nil}, []string{"0", "1", "2"}},
	}
	for _, tc := range cases {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c, g, _ := startGated(t, &Options{OutboxSize: 2, OutboxPolicy: tc.policy})
			r := &results{got: map[string]error{}}
			require.NoError(t, c.WriteAsync(OpText, []byte("0"), r.done("0")))
			g.waitWrite(t)
			require.NoError(t, c.WriteAsync(OpText, []byte("1"), r.done("1")))
			require.NoError(t, c.WriteAsync(OpText, []byte("2"), r.done("2")))
			require.Equal(t, tc.ret, c.WriteAsync(OpText, []byte("3"), r.done("3")))
			g.open()
			require.Eventually(t, func() bool { return len(r.snapshot()) == len(tc.done) }, 5*time.Second, time.Millisecond)
			require.Equal(t, tc.done, r.snapshot())
			fs, _ := g.frames(t)
			require.Equal(t, tc.written, payloads(fs))
		})
	}
	require.Equal(t, "OutboxCloseSlow", OutboxCloseSlow.String())
	require.Equal(t, "OutboxPolicy(7)", OutboxPolicy(7).String())
}

// Dropping the oldest again and again keeps the outbox's slice bounded and
// its order intact.
func TestOutboxDropOldestKeepsTheLatest(t *testing.T) {
	c, g, _ := startGated(t, &Options{OutboxSize: 4, OutboxPolicy: OutboxDropOldest})
	require.NoError(t, c.WriteAsync(OpText, []byte("first"), nil))
	g.waitWrite(t)
	for i := range 1000 {
		require.NoError(t, c.WriteAsync(OpText, []byte{byte('0' + i%10)}, nil))
	}
	o := c.wr.box()
	o.mu.Lock()
	require.LessOrEqual(t, o.queue.Cap(), 16)
	o.mu.Unlock()
	g.open()
	require.Eventually(t, func() bool { fs, _ := g.frames(t); return len(fs) == 5 }, 5*time.Second, time.Millisecond)
	fs, _ := g.frames(t)
	require.Equal(t, []string{"first", "6", "7", "8", "9"}, payloads(fs))
}

// OutboxCloseSlow: the queue goes, the write in progress completes, then the
// close frame with 1008; OnClose sees ErrSlowConsumer, whether the peer
// answers the close frame or just goes away.
func TestOutboxCloseSlow(t *testing.T) {
	for _, answer := range []bool{true, false} {
		name := map[bool]string{true: "peer answers", false: "peer goes"}[answer]
		t.Run(name, func(t *testing.T) {
			c, g, h := startGated(t, &Options{OutboxSize: 2, OutboxPolicy: OutboxCloseSlow})
			r := &results{got: map[string]error{}}
			pm, err := NewPreparedMessage(OpText, []byte("p"))
			require.NoError(t, err)
			require.NoError(t, c.WritePreparedAsync(pm, r.done("0")))
			g.waitWrite(t)
			require.NoError(t, c.WritePreparedAsync(pm, r.done("1")))
			require.NoError(t, c.WriteAsync(OpText, []byte("2"), r.done("2")))
			require.ErrorIs(t, c.WritePreparedAsync(pm, r.done("3")), ErrSlowConsumer)
			require.Equal(t, map[string]error{"1": ErrSlowConsumer, "2": ErrSlowConsumer}, r.snapshot(),
				"the discarded messages are told at once")
			require.ErrorIs(t, c.WriteAsync(OpText, nil, nil), net.ErrClosed, "the outbox takes nothing more")

			g.open()
			require.Eventually(t, func() bool { fs, _ := g.frames(t); return len(fs) == 2 }, 5*time.Second, time.Millisecond)
			fs, _ := g.frames(t)
			require.Equal(t, "p", string(fs[0].payload), "the write in progress completes")
			require.Equal(t, byte(0x88), fs[1].b0)
			require.Equal(t, []byte{0x03, 0xf0}, fs[1].payload[:2], "1008")
			require.Equal(t, map[string]error{"0": nil, "1": ErrSlowConsumer, "2": ErrSlowConsumer}, r.snapshot())

			if answer {
				g.in <- frame(0x88, []byte{0x03, 0xf0})
			} else {
				g.Close()
			}
			err = h.waitClose(t)
			h.closed <- err // for the cleanup
			require.ErrorIs(t, err, ErrSlowConsumer)
			var pe *ProtocolError
			require.False(t, errors.As(err, &pe))
		})
	}
}

// Messages still queued when the connection ends get an error, before
// OnClose; once it has ended, or once a close frame was sent, the outbox
// takes nothing.
func TestOutboxAfterTheEnd(t *testing.T) {
	c, g, h := startGated(t, nil)
	var mu sync.Mutex
	var dones []error
	done := func(err error) { mu.Lock(); dones = append(dones, err); mu.Unlock() }
	require.NoError(t, c.WriteAsync(OpText, []byte("held"), done))
	g.waitWrite(t)
	for range 3 {
		require.NoError(t, c.WriteAsync(OpText, []byte("queued"), done))
	}
	g.Close()
	err := h.waitClose(t)
	h.closed <- err
	mu.Lock()
	require.Len(t, dones, 4, "every done ran before OnClose")
	for _, e := range dones {
		require.Error(t, e)
	}
	mu.Unlock()
	pm, err := NewPreparedMessage(OpText, nil)
	require.NoError(t, err)
	require.ErrorIs(t, c.WriteAsync(OpText, nil, nil), net.ErrClosed)
	require.ErrorIs(t, c.WritePreparedAsync(pm, nil), net.ErrClosed)

	c2, g2, _ := startGated(t, nil)
	g2.open()
	require.NoError(t, c2.Close(StatusNormalClosure, ""))
	require.ErrorIs(t, c2.WriteAsync(OpText, nil, nil), net.ErrClosed)
	require.ErrorIs(t, c2.WritePreparedAsync(pm, nil), net.ErrClosed)
}

func BenchmarkWritePreparedAsync1KiB(b *testing.B) {
	sc := newStreamConn(nil, 0)
	c := newConn(sc, newConfig(Options{}, true), discardHandler{}, true, nil, "")
	pm, _ := NewPreparedMessage(OpBinary, repeat("a", 1024))
	b.ReportAllocs()
	for b.Loop() {
		for c.WritePreparedAsync(pm, nil) == ErrQueueFull {
			time.Sleep(time.Microsecond)
		}
	}
	c.inflight.Wait()
}

// On a socket, WriteAsync with an empty outbox writes at once from the
// calling goroutine (done is called before it returns), and what a peer
// that has stopped reading does not take waits in the backlog, ahead of
// what is queued after it: once the peer reads again, every message
// arrives, in order.
func TestOutboxWritesAtOnceOnASocket(t *testing.T) {
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		addr := m.start(t, h, &Options{OutboxSize: 1 << 12, WriteTimeout: 30 * time.Second})
		c := dialRaw(t, addr, nil)
		sc := h.waitOpen(t)

		called := false
		require.NoError(t, sc.WriteAsync(OpText, []byte("now"), func(err error) {
			require.NoError(t, err)
			called = true
		}))
		require.True(t, called, "done is called before WriteAsync returns when the outbox is empty")
		c.expectMessage(OpText, []byte("now"))

		const n, size = 400, 64 << 10 // 25 MiB: past what loopback's socket buffers hold
		var failed atomic.Int32
		for i := range n {
			p := bytes.Repeat([]byte{byte(i)}, size)
			err := sc.WriteAsync(OpBinary, p, func(err error) {
				if err != nil {
					failed.Add(1)
				}
			})
			require.NoError(t, err)
		}
		c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		for i := range n {
			c.expectMessage(OpBinary, bytes.Repeat([]byte{byte(i)}, size))
		}
		require.Zero(t, failed.Load())
	})
}

// OutboxCloseSlow over TCP, with a peer that stopped reading: if it reads
// again after the overflow, what was in flight reaches it, then the 1008
// close frame, and Metrics reports 1008 "slow"; if it never reads again it
// is cut within CloseTimeout of the overflow (WriteTimeout is far longer),
// Metrics reporting 1006 "slow".
func TestOutboxCloseSlowReachesThePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("fills socket buffers")
	}
	for _, resume := range []bool{true, false} {
		name := map[bool]string{true: "peer reads again", false: "peer never reads"}[resume]
		t.Run(name, func(t *testing.T) {
			forEachTCPMode(t, func(t *testing.T, m serverMode) {
				h := newRecorder()
				ml := &metricsLog{}
				closeTimeout := 2 * time.Second
				if !resume {
					closeTimeout = 300 * time.Millisecond
				}
				addr := m.start(t, h, &Options{OutboxSize: 8, OutboxPolicy: OutboxCloseSlow,
					CloseTimeout: closeTimeout, WriteTimeout: time.Minute, Metrics: ml})
				c := dialRaw(t, addr, nil)
				sc := h.waitOpen(t)

				p := bytes.Repeat([]byte{'x'}, 64<<10)
				var err error
				for range 4000 { // 256 MiB at most: far past what loopback's buffers hold
					if err = sc.WriteAsync(OpBinary, p, nil); err != nil {
						break
					}
				}
				require.ErrorIs(t, err, ErrSlowConsumer)
				overflow := time.Now()
				// A write waiting for its turn meanwhile fails once the
				// close frame is out, or the connection is cut.
				late := make(chan error, 1)
				go func() { late <- sc.WriteMessage(OpText, []byte("late")) }()

				if resume {
					c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
					for { // what was in flight, then the close frame: nothing after the overflow
						b0, payload, err := c.readFrame()
						require.NoError(t, err, "waiting for close 1008")
						if b0 == 0x88 {
							require.Equal(t, StatusPolicyViolation, StatusCode(binary.BigEndian.Uint16(payload)))
							break
						}
						require.Equal(t, byte(0x82), b0, "only what was written before the overflow")
						require.Len(t, payload, len(p))
					}
					c.send(frame(0x88, []byte{0x03, 0xf0}))
					require.ErrorIs(t, <-late, net.ErrClosed)
					require.ErrorIs(t, h.waitClose(t), ErrSlowConsumer)
					require.Equal(t, closeEvent{StatusPolicyViolation, causeSlow}, ml.waitClose(t))
					return
				}
				err = h.waitClose(t)
				elapsed := time.Since(overflow)
				require.ErrorIs(t, err, ErrSlowConsumer)
				require.Less(t, elapsed, closeTimeout+2*time.Second, "cut by CloseTimeout, not WriteTimeout")
				// 1006 when the close frame never left; 1008 when the socket
				// took it (the unsent limit leaves a socket room for a small
				// write now and then) and the peer never answered.
				ev := ml.waitClose(t)
				require.Equal(t, causeSlow, ev.cause)
				require.Contains(t, []StatusCode{StatusAbnormalClosure, StatusPolicyViolation}, ev.code)
				require.ErrorIs(t, <-late, net.ErrClosed)
			})
		})
	}
}

// A fan-out (WritePreparedAsync to many connections) is written at once by
// the caller, but one that follows the previous fan-out back to back
// (within fanoutBackToBack) is queued on the connections that got that one
// too, so that a publisher running flat out lets messages gather into one
// write; a connection that missed the previous fan-out, and a fan-out after
// a pause, are written at once again. Metrics.Queued counts what is queued,
// under the outbox's lock, before WritePreparedAsync returns.
func TestOutboxBackToBackFanoutQueues(t *testing.T) {
	// Wide enough that a slow test machine keeps the fan-outs back to back;
	// a pause is made by moving the last fan-out's time back (pause), not
	// by waiting.
	old := fanoutBackToBack
	fanoutBackToBack = time.Second
	t.Cleanup(func() { fanoutBackToBack = old })
	pause := func() { fanoutLast.Store(int64(time.Since(fanoutEpoch)) - int64(time.Hour)) }
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		ml := &metricsLog{}
		addr := m.start(t, h, &Options{Metrics: ml})
		a, sa := dialRaw(t, addr, nil), h.waitOpen(t)
		b, sb := dialRaw(t, addr, nil), h.waitOpen(t)
		x, sx := dialRaw(t, addr, nil), h.waitOpen(t)
		queuedIn := func() int {
			ml.mu.Lock()
			defer ml.mu.Unlock()
			return ml.queuedIn
		}
		fanout := func(p string, conns ...*Conn) *PreparedMessage {
			pm, err := NewPreparedMessage(OpText, []byte(p))
			require.NoError(t, err)
			for _, c := range conns {
				require.NoError(t, c.WritePreparedAsync(pm, nil))
			}
			return pm
		}

		pause()
		fanout("1", sa, sb)
		require.Zero(t, queuedIn(), "a fan-out after a pause is written at once")
		fanout("2", sa, sb)
		require.Equal(t, 2, queuedIn(), "back to back: queued on the connections that got the fan-out before")
		fanout("3", sa, sx)
		require.Equal(t, 3, queuedIn(), "x missed the fan-out before and is written at once")
		for _, c := range []*rawClient{a, b, x} {
			c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		}
		a.expectMessage(OpText, []byte("1"))
		a.expectMessage(OpText, []byte("2"))
		a.expectMessage(OpText, []byte("3"))
		b.expectMessage(OpText, []byte("1"))
		b.expectMessage(OpText, []byte("2"))
		x.expectMessage(OpText, []byte("3"))

		for _, c := range []*Conn{sa, sb} { // their writer goroutines are done
			assertEventually(5*time.Second, func() bool {
				o := c.wr.box()
				o.mu.Lock()
				defer o.mu.Unlock()
				return !o.busy
			})
		}
		pause()
		fanout("4", sa, sb)
		require.Equal(t, 3, queuedIn(), "after a pause, written at once again")
		a.expectMessage(OpText, []byte("4"))
		b.expectMessage(OpText, []byte("4"))
	})
}

// A burst queued faster than the writer goroutine is scheduled fills the
// outbox though the peer reads at full speed (a thousand presence events
// to each member of a room, on a busy machine). The peer is slow only if
// its socket is full too: the queueing caller then writes what is queued
// itself, and OutboxPolicy is left for peers that do not read.
func TestOutboxBurstToAReaderIsNotSlow(t *testing.T) {
	for _, mode := range []struct {
		name    string
		netpoll bool
	}{{"goroutine", false}, {"netpoll", true}} {
		t.Run(mode.name, func(t *testing.T) {
			const n = 1000
			// burst queues n messages on a fresh connection, on one P: the
			// writer goroutines it starts cannot run before the outbox fills,
			// unless the scheduler preempts the burst while a writer is
			// mid-batch (-race makes that likely), when a full outbox is
			// refused as it should be. So a refusal is tried again, twice;
			// without relieveLocked every try is refused at message 17.
			burst := func() (*net.TCPConn, error) {
				server, client := tcpPair(t)
				c := newConn(server, newConfig(Options{Netpoll: mode.netpoll, OutboxSize: 16}, true), BuiltinEventHandler{}, true, nil, "")
				t.Cleanup(func() { c.CloseNow() })
				prev := runtime.GOMAXPROCS(1)
				defer runtime.GOMAXPROCS(prev)
				for i := range n {
					pm, err := NewPreparedMessage(OpBinary, binary.BigEndian.AppendUint64(nil, uint64(i)))
					if err == nil {
						err = c.WritePreparedAsync(pm, nil) // a fan-out, back to back: queued
					}
					if err != nil {
						return nil, fmt.Errorf("message %d: %w", i, err)
					}
				}
				return client, nil
			}
			var client *net.TCPConn
			var err error
			for range 3 {
				if client, err = burst(); err == nil {
					break
				}
				t.Logf("refused: %v", err)
			}
			require.NoError(t, err)

			b := make([]byte, n*(2+8)) // unmasked frames of 8 bytes
			_, err = io.ReadFull(client, b)
			require.NoError(t, err, "the peer reads every message")
			fs, err := parseFrames(b)
			require.NoError(t, err)
			require.Len(t, fs, n)
			for i, f := range fs {
				require.Equal(t, uint64(i), binary.BigEndian.Uint64(f.payload), "in order")
			}
		})
	}
}
