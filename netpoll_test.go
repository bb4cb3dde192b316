//go:build linux

package gust

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// The netpoll modes of serverModes run the wire tests in netpoll mode; these
// check what is its own: idle connections hold no goroutine, ReadLoop
// returns, and whatever ends a parked connection reaches OnClose.

// goroutinesIn counts the goroutines whose stacks (with their headers,
// such as "[IO wait]") contain every one of parts.
func goroutinesIn(parts ...string) int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(g, p) }) {
			n++
		}
	}
	return n
}

// parkedIdle reports whether c is parked and no goroutine serves a
// connection: c's last park has finished.
func parkedIdle(c *Conn) bool {
	return c.sock().Parked() && goroutinesIn("gust.(*Conn).serve") == 0
}

// echoRounds has each client send a message and read its echo, rounds
// times over, each echo within wait: the connections a test holds up
// another one beside are still served.
func echoRounds(t *testing.T, clients []*rawClient, rounds int, wait time.Duration) {
	t.Helper()
	for round := range rounds {
		for i, c := range clients {
			msg := []byte{byte(round), byte(i)}
			c.send(frame(0x82, msg))
			c.nc.SetReadDeadline(time.Now().Add(wait))
			c.expectMessage(OpBinary, msg)
		}
	}
}

// forEachNetpollMode runs f over the server modes in netpoll mode (both
// paths), for what is netpoll mode's own.
func forEachNetpollMode(t *testing.T, f func(t *testing.T, m serverMode)) {
	for _, m := range netpollModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// netpollModes are the server modes in netpoll mode.
var netpollModes = func() (modes []serverMode) {
	for _, m := range serverModes {
		if strings.HasSuffix(m.name, "-netpoll") {
			modes = append(modes, m)
		}
	}
	return modes
}()

// Idle connections in netpoll mode hold no goroutine of gust's (and so no
// ReadLoop), yet every one of them still echoes, and the event loop ends
// with the last connection.
func TestNetpollIdleConnectionsHoldNoGoroutine(t *testing.T) {
	forEachNetpollMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, nil)
		const n = 50
		clients := make([]*rawClient, n)
		for i := range clients {
			clients[i] = dialRaw(t, addr, nil)
			h.waitOpen(t)
		}
		require.Eventually(t, func() bool { return goroutinesIn("gust.(*Conn).serve") == 0 },
			5*time.Second, 10*time.Millisecond, "idle connections still have a read goroutine")
		require.LessOrEqual(t, goroutinesIn("netpoll.(*poller).loop"), runtime.GOMAXPROCS(0), "an event loop per P at most")
		for i, c := range clients {
			c.send(frame(0x81, []byte("hello")))
			c.expectMessage(OpText, []byte("hello"))
			if i%2 == 0 { // and again, after parking once more
				c.send(frame(0x82, []byte{byte(i)}))
				c.expectMessage(OpBinary, []byte{byte(i)})
			}
		}
		for _, c := range clients {
			c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
			c.expectClose(StatusNormalClosure)
			var ce *CloseError
			require.ErrorAs(t, h.waitClose(t), &ce)
			require.Equal(t, StatusNormalClosure, ce.Code)
		}
		require.Eventually(t, func() bool { return goroutinesIn("netpoll.(*poller).loop") == 0 },
			5*time.Second, 10*time.Millisecond, "the event loop outlived its connections")
	})
}

// In netpoll mode ReadLoop returns once the connection is idle; OnClose
// comes later, once, from the goroutine that sees the end.
func TestNetpollReadLoopReturns(t *testing.T) {
	t.Parallel()
	h := newEcho()
	u := newUpgrader(h, &Options{Netpoll: true})
	returned := make(chan *Conn, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
		returned <- c
	}))
	t.Cleanup(ts.Close)
	c := dialRaw(t, ts.Listener.Addr().String(), nil)
	var conn *Conn
	select {
	case conn = <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("ReadLoop did not return for an idle connection in netpoll mode")
	}
	c.send(frame(0x81, []byte("after")))
	c.expectMessage(OpText, []byte("after"))
	require.NoError(t, conn.Close(StatusGoingAway, "bye"))
	c.expectClose(StatusGoingAway)
	var ce *CloseError
	require.ErrorAs(t, h.waitClose(t), &ce)
	require.Equal(t, StatusGoingAway, ce.Code)
	select {
	case err := <-h.closed:
		t.Fatalf("OnClose called twice: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
}

// Whatever ends a parked connection from outside (CloseNow, a close frame
// the peer never answers, a silent peer under heartbeats, a read deadline,
// Shutdown's cut) reaches OnClose, though no goroutine reads it.
func TestNetpollParkedConnectionsEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		end  func(c *Conn)
		want func(t *testing.T, err error)
	}{
		{"CloseNow", Options{}, func(c *Conn) { c.CloseNow() }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, net.ErrClosed)
		}},
		{"Close unanswered", Options{CloseTimeout: 100 * time.Millisecond}, func(c *Conn) {
			c.Close(StatusGoingAway, "")
		}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
		{"heartbeat", Options{PingInterval: 60 * time.Millisecond}, func(c *Conn) {}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
		{"read deadline", Options{}, func(c *Conn) {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
		// The timer that wakes a parked connection is made once and moved.
		{"read deadline moved", Options{}, func(c *Conn) {
			c.SetReadDeadline(time.Now().Add(time.Hour))
			c.SetReadDeadline(time.Time{})
			c.SetReadDeadline(time.Now().Add(2 * time.Hour))
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
	}
	for _, tt := range tests {
		for _, m := range serverModes {
			if !strings.HasSuffix(m.name, "-netpoll") {
				continue
			}
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				h := newRecorder()
				opts := tt.opts
				dialRaw(t, m.start(t, h, &opts), nil) // a peer that sends nothing and answers nothing
				c := h.waitOpen(t)
				require.Eventually(t, func() bool { return c.sock().Parked() }, 5*time.Second, time.Millisecond, "parked")
				start := time.Now()
				tt.end(c)
				tt.want(t, h.waitClose(t))
				require.Less(t, time.Since(start), 3*time.Second)
			})
		}
	}
}

// A frame that arrives a few bytes at a time is parsed on the event loop as
// far as its bytes go, and parked in between with no goroutine: the parser
// resumes where it stopped, in the header, the masking key, the payload or
// a control frame.
func TestNetpollFrameInPiecesParksBetween(t *testing.T) {
	forEachNetpollMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, nil)
		c := dialRaw(t, addr, nil)
		sc := h.waitOpen(t)
		// parked waits until sc has parked again and reports whether it
		// kept its read state.
		var held atomic.Bool
		var parks atomic.Int64
		hook := func(c *Conn, holds bool) {
			if c == sc {
				held.Store(holds)
				parks.Add(1)
			}
		}
		hookPark(t, hook)
		// send sends b and returns a function that waits until sc has
		// parked after it, and reports whether it kept its read state.
		send := func(b []byte) (parked func() bool) {
			n := parks.Load()
			c.send(b)
			return func() bool {
				require.Eventually(t, func() bool {
					return parks.Load() > n && parkedIdle(sc)
				}, 5*time.Second, time.Millisecond, "parked")
				return held.Load()
			}
		}
		parked := send(frame(0x89, nil))
		c.readFrame()
		require.False(t, parked(), "an idle connection holds no read state")
		payload := bytes.Repeat([]byte("piece by piece "), 20) // 300 bytes: a 16-bit length
		ping := frame(0x89, []byte("ping"))
		stream := append(ping, frame(0x81, payload)...)
		cuts := []int{1, 2, 3, 5, 6, 9, len(ping), 12, 13, 50, 200, len(stream) - 1}
		prev := 0
		for _, cut := range cuts {
			parked := send(stream[prev:cut])
			prev = cut
			// Between the frames nothing is in progress.
			require.Equal(t, cut != len(ping), parked(), "a connection parked in a frame keeps its read state (cut at %d)", cut)
		}
		parked = send(stream[prev:])
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x8a), b0, "the pong")
		require.Equal(t, []byte("ping"), p)
		c.expectMessage(OpText, payload)
		require.False(t, parked(), "the read state goes back once the message is whole")
	})
}

// A peer that stops reading while its handler writes fills its socket:
// what the socket does not take waits in the connection's backlog, and the
// event loop goes on serving the other connections meanwhile. Once the
// peer reads again, it gets every byte, in order.
func TestNetpollPeerThatStopsReadingHoldsUpNoOther(t *testing.T) {
	forEachNetpollMode(t, func(t *testing.T, m serverMode) {
		const big = 256 << 10
		const count = 160 // 40 MiB in all: past what loopback's socket buffers hold
		h := newFlooder(count, big)
		addr := m.start(t, h, &Options{WriteTimeout: 30 * time.Second})
		slow := dialRaw(t, addr, nil)
		sc := h.waitOpen(t)
		others := make([]*rawClient, 8)
		for i := range others {
			others[i] = dialRaw(t, addr, nil)
		}
		slow.send(frame(0x81, []byte("flood")))
		waitSocketFull(t, sc)
		echoRounds(t, others, 20, 2*time.Second)
		slow.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		for i := range count {
			slow.expectMessage(OpBinary, bytes.Repeat([]byte{byte(i)}, big))
		}
		slow.send(frame(0x81, []byte("after")))
		slow.expectMessage(OpText, []byte("after"))
	})
}

// waitSocketFull waits, up to 10 s, until c's socket has refused bytes:
// they wait in c's backlog (a write on an event loop), or a write waits on
// the socket with the write lock held, seen at two looks in a row.
func waitSocketFull(t *testing.T, c *Conn) {
	t.Helper()
	held := 0
	require.Eventually(t, func() bool {
		if !c.wr.mu.TryLock() {
			held++
			return held >= 2
		}
		defer c.wr.mu.Unlock()
		held = 0
		return c.wr.backlog != nil // empty for TLS: the records wait in crypto/tls's layer
	}, 10*time.Second, 5*time.Millisecond, "the socket never filled")
}

// newFlooder answers "flood" with count binary messages of size bytes, the
// i-th all bytes i, and echoes anything else.
func newFlooder(count, size int) *recorder {
	h := newRecorder()
	h.message = func(c *Conn, m *Message) {
		if string(m.Data) == "flood" {
			for i := range count {
				c.WriteMessage(OpBinary, bytes.Repeat([]byte{byte(i)}, size))
			}
		} else {
			c.WriteMessage(m.Opcode, m.Data)
		}
		m.Close()
	}
	return h
}

// A streamed message (Options.StreamThreshold) is read by its handler on a
// goroutine that waits for each fragment, in netpoll mode too: a fragment
// that has not come yet is waited for, not parked on, and the connection
// parks again once the message is read.
func TestNetpollStreamedMessageWaitsForItsFragments(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		got := make(chan []byte, 1)
		h.message = func(c *Conn, msg *Message) {
			b, err := io.ReadAll(msg)
			if err != nil {
				b = []byte("error: " + err.Error())
			}
			got <- b
		}
		addr := m.start(t, h, &Options{StreamThreshold: 1024})
		c := dialRaw(t, addr, nil)
		part := bytes.Repeat([]byte("s"), 2000)
		c.send(frame(0x01, part)) // past the threshold: streamed
		time.Sleep(50 * time.Millisecond)
		c.send(frame(0x00, part))
		time.Sleep(50 * time.Millisecond)
		c.send(frame(0x80, []byte("end")))
		select {
		case b := <-got:
			require.Equal(t, string(part)+string(part)+"end", string(b))
		case <-time.After(5 * time.Second):
			t.Fatal("the streamed message never reached its end")
		}
		c.send(frame(0x89, []byte("after")))
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x8a), b0)
		require.Equal(t, []byte("after"), p)
	})
}

// Dial's connections run in netpoll mode too: the client's ReadLoop returns
// once it is idle, and the event loops deliver what arrives later.
func TestNetpollClient(t *testing.T) {
	t.Parallel()
	addr := startServer(t, newEcho(), nil)
	h := newRecorder()
	c, _, err := Dial(context.Background(), "ws://"+addr+"/", h, &DialOptions{Options: Options{Netpoll: true}})
	require.NoError(t, err)
	returned := make(chan struct{})
	go func() {
		c.ReadLoop()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the client's ReadLoop did not return for an idle connection in netpoll mode")
	}
	for i := range 3 {
		msg := []byte{'m', byte('0' + i)}
		require.NoError(t, c.WriteMessage(OpBinary, msg))
		require.Equal(t, msg, h.waitMessage(t).data)
	}
	require.NoError(t, c.Close(StatusNormalClosure, ""))
	var ce *CloseError
	require.ErrorAs(t, h.waitClose(t), &ce)
	require.Equal(t, StatusNormalClosure, ce.Code)
}

// A peer that keeps sending holds up no other connection of its event
// loop (the loop moves on once a read drains the socket, and after
// loopWorkBudget bytes at most): the others are answered meanwhile, and the
// flood is echoed whole.
func TestNetpollFloodingPeerHoldsUpNoOther(t *testing.T) {
	forEachNetpollMode(t, func(t *testing.T, m serverMode) {
		addr := m.start(t, newEcho(), nil)
		flood := dialRaw(t, addr, nil)
		others := make([]*rawClient, 8)
		for i := range others {
			others[i] = dialRaw(t, addr, nil)
		}
		msg := bytes.Repeat([]byte("f"), 1000)
		var batch []byte
		for range 64 {
			batch = append(batch, frame(0x82, msg)...)
		}
		stop := make(chan struct{})
		sent := make(chan int, 1)
		go func() { // sends without pause until stopped
			n := 0
			for {
				select {
				case <-stop:
					sent <- n
					return
				default:
				}
				if _, err := flood.nc.Write(batch); err != nil {
					sent <- -1
					return
				}
				n += 64
			}
		}()
		var echoed atomic.Int64
		go func() {
			flood.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
			for {
				if _, p, err := flood.readFrame(); err != nil || !bytes.Equal(p, msg) {
					return
				}
				echoed.Add(1)
			}
		}()
		require.Eventually(t, func() bool { return echoed.Load() > 0 }, 5*time.Second, time.Millisecond, "the flood is on")
		echoRounds(t, others, 10, 5*time.Second)
		close(stop)
		n := <-sent
		require.Positive(t, n)
		require.Eventually(t, func() bool { return echoed.Load() == int64(n) }, 20*time.Second, time.Millisecond,
			"the flood was not echoed whole")
	})
}

// A handler on an event loop that fills a peer's socket and then panics:
// what it wrote waits in the backlog, and the 1011 goes out after it once
// the peer reads, though the writes of the loop's dispatch could not wait.
func TestNetpollPanicAfterAFullSocketStillSends1011(t *testing.T) {
	forEachNetpollMode(t, func(t *testing.T, m serverMode) {
		count, big := 160, 256<<10 // 40 MiB: past what loopback's socket buffers hold
		if testing.Short() {
			count = 64 // 16 MiB: past them still (the server's socket keeps 64 KiB unsent)
		}
		h := newRecorder()
		h.message = func(c *Conn, msg *Message) {
			for i := range count {
				c.WriteMessage(OpBinary, bytes.Repeat([]byte{byte(i)}, big))
			}
			panic("boom")
		}
		addr := m.start(t, h, &Options{Logger: newLogger(io.Discard), WriteTimeout: 30 * time.Second})
		c := dialRaw(t, addr, nil)
		sc := h.waitOpen(t)
		c.send(frame(0x81, []byte("go")))
		waitSocketFull(t, sc)
		c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		for i := range count {
			c.expectMessage(OpBinary, bytes.Repeat([]byte{byte(i)}, big))
		}
		b0, p, err := c.readFrame()
		require.NoError(t, err, "the 1011 was lost")
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, StatusInternalError, StatusCode(binary.BigEndian.Uint16(p)))
		var pe *PanicError
		require.ErrorAs(t, h.waitClose(t), &pe)
	})
}

// waitingClose is a recorder whose OnClose waits until every one of n
// connections' OnClose has started.
type waitingClose struct {
	*recorder
	n        int32
	started  atomic.Int32
	all      chan struct{}
	timedOut atomic.Bool
}

func (w *waitingClose) OnClose(c *Conn, err error) {
	if w.started.Add(1) == w.n {
		close(w.all)
	}
	select {
	case <-w.all:
	case <-time.After(10 * time.Second):
		w.timedOut.Store(true)
	}
	w.recorder.OnClose(c, err)
}

// The ends the event loops hand over (the peers' close frames here) run on
// a few goroutines, about GOMAXPROCS, so that many ending at once do not
// crowd the loops out of the CPUs; yet ends that wait overlap, as with a
// goroutine each: every connection's OnClose here waits until all of them
// have started, which that few alone would never let happen.
func TestNetpollEndsThatWaitOverlap(t *testing.T) {
	n := 4*runtime.GOMAXPROCS(0) + 4
	h := &waitingClose{recorder: newRecorder(), n: int32(n), all: make(chan struct{})}
	addr := startServer(t, h, &Options{Netpoll: true})
	clients := make([]*rawClient, n)
	for i := range clients {
		clients[i] = dialRaw(t, addr, nil)
		c := h.waitOpen(t)
		require.Eventually(t, func() bool { return c.sock().Parked() }, 5*time.Second, time.Millisecond)
	}
	for _, c := range clients {
		c.send(frame(0x88, []byte{0x03, 0xe8}))
	}
	select {
	case <-h.all:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d OnClose calls started", h.started.Load(), n)
	}
	for range n {
		require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
	}
	require.False(t, h.timedOut.Load())
	for _, c := range clients {
		c.expectClose(StatusNormalClosure)
	}
}

// A connection's turn on an event loop is bounded by the work it does, not
// by its reads: a compressed message that inflates to megabytes, or many
// small ones that add up, are inflated and handled on a goroutine of the
// connection's own. The handler here holds every large message until the
// test ends; the other connections, some on the same loop, are served
// meanwhile.
func TestNetpollCompressedWorkLeavesTheLoop(t *testing.T) {
	cases := []struct {
		name     string
		messages [][]byte // sent at once, deflated
	}{
		// 16 MiB of zeros in about 16 KiB on the wire.
		{"one large", [][]byte{testkit.DeflateBomb(16 << 20)}},
		// 600 KiB each in under 1 KiB: the third passes the turn's budget.
		{"small ones adding up", [][]byte{testkit.DeflateBomb(600 << 10), testkit.DeflateBomb(600 << 10), testkit.DeflateBomb(600 << 10)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachNetpollMode(t, func(t *testing.T, m serverMode) {
				release := make(chan struct{})
				held := make(chan bool, len(tc.messages)) // whether each large message was handled on a loop
				h := newRecorder()
				h.opened = nil
				h.message = func(c *Conn, msg *Message) {
					defer msg.Close()
					if len(msg.Data) < 64<<10 {
						c.WriteMessage(msg.Opcode, msg.Data)
						return
					}
					held <- strings.Contains(string(debug.Stack()), "(*poller).loop")
					if len(held) == cap(held) || len(tc.messages) == 1 {
						<-release // a handler that takes long: on the loop it would hold up the others
					}
				}
				defer close(release)
				addr := m.start(t, h, &Options{MaxMessageSize: 32 << 20, Compression: CompressionOptions{Enabled: true}})
				others := make([]*rawClient, 8)
				for i := range others {
					others[i] = dialRaw(t, addr, nil)
				}
				big := dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover")
				var burst []byte
				for _, p := range tc.messages {
					require.Less(t, len(p), 32<<10)
					burst = append(burst, frame(0xC2, p)...)
				}
				big.send(burst)
				var onLoop bool
				for range tc.messages {
					select {
					case onLoop = <-held:
					case <-time.After(10 * time.Second):
						t.Fatal("the large messages were not dispatched")
					}
				}
				require.False(t, onLoop, "the last large message was handled on the event loop")
				echoRounds(t, others, 5, 3*time.Second)
			})
		})
	}
}
