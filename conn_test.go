package gust

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/netpoll"
	"github.com/gustws/gust/internal/testkit"
)

func TestPingPongAndSession(t *testing.T) {
	t.Parallel()
	pongs := make(chan string, 1)
	h := newRecorder()
	h.open = func(c *Conn) { c.Set("user", "ann") }
	h.pong = func(c *Conn, p []byte) {
		v, _ := c.Get("user")
		pongs <- v.(string) + ":" + string(p)
	}
	c := dialRaw(t, startServer(t, h, nil), nil)
	c.send(frame(0x89, []byte("hello")))
	b0, p, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x8A), b0)
	require.Equal(t, "hello", string(p))
	c.send(frame(0x8A, []byte("unsolicited")))
	require.Equal(t, "ann:unsolicited", <-pongs)
}

func TestConnValues(t *testing.T) {
	t.Parallel()
	c := newConn(plainConn{}, newConfig(Options{}, true), BuiltinEventHandler{}, true, nil, "")
	_, ok := c.Get("a")
	require.False(t, ok)
	c.Set("a", 1)
	c.Set("b", 2)
	v, ok := c.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)
	c.Delete("a")
	_, ok = c.Get("a")
	require.False(t, ok)
	v, _ = c.Get("b")
	require.Equal(t, 2, v)
}

func TestPanicInCallbackClosesWith1011(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		for _, parallel := range []bool{false, true} {
			h := newRecorder()
			h.message = func(c *Conn, m *Message) { panic("boom") }
			var logged testkit.Buffer
			opts := &Options{Logger: newLogger(&logged)}
			if parallel {
				opts.Parallel = 8
			}
			c := dialRaw(t, m.start(t, h, opts), nil)
			c.send(frame(0x81, []byte("x")))
			b0, p, err := c.readFrame()
			require.NoError(t, err)
			require.Equal(t, byte(0x88), b0)
			require.Equal(t, StatusInternalError, StatusCode(uint16(p[0])<<8|uint16(p[1])))
			var pe *PanicError
			require.ErrorAs(t, h.waitClose(t), &pe)
			require.Equal(t, "boom", pe.Value)
			require.Contains(t, string(pe.Stack), "panic")
			// One structured record: the details are attributes.
			require.Eventually(t, func() bool { return strings.Contains(logged.String(), "panic=boom") }, 5*time.Second, time.Millisecond)
			rec := logged.String()
			require.Contains(t, rec, "level=ERROR")
			require.Contains(t, rec, `msg="gust: panic in event handler"`)
			require.Contains(t, rec, "code=1011")
			require.Regexp(t, `remote=127\.0\.0\.1:\d+`, rec)
			require.Regexp(t, `stack="goroutine \d+`, rec)
		}
	})
}

// Options.Parallel bounds the handlers in flight; in netpoll mode the
// event loop hands the connection to a goroutine rather than wait for a
// handler to end.
func TestParallelHandlesConcurrently(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		var inflight, peak atomic.Int32
		release := make(chan struct{})
		h.message = func(c *Conn, m *Message) {
			n := inflight.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
			inflight.Add(-1)
			c.WriteMessage(m.Opcode, m.Data)
			m.Close()
		}
		c := dialRaw(t, m.start(t, h, &Options{Parallel: 3}), nil)
		for i := 0; i < 6; i++ {
			c.send(frame(0x81, []byte("m")))
		}
		require.Eventually(t, func() bool { return peak.Load() == 3 }, 5*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		require.Equal(t, int32(3), peak.Load(), "Options.Parallel bounds the handlers in flight")
		close(release)
		for i := 0; i < 6; i++ {
			c.expectMessage(OpText, []byte("m"))
		}
	})
}

func TestClientSideConnMasksWritesAndReadsUnmaskedFrames(t *testing.T) {
	t.Parallel()
	peer, nc := tcpPair(t)
	h := newRecorder()
	c := newConn(nc, newConfig(Options{ReadBufferSize: 512, WriteBufferSize: 1024}, false), h, false, nil, "")
	go c.ReadLoop()

	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KiB: masked through a pooled buffer
	writeErr := make(chan error, 1)
	go func() {
		errs := []error{c.WriteString("hello"), c.WriteMessage(OpBinary, big), c.WritePing([]byte("p"))}
		for i := 0; i < 20; i++ { // more keys than one refill of the mask source
			errs = append(errs, c.WriteMessage(OpText, []byte{'a' + byte(i)}))
		}
		writeErr <- errors.Join(errs...)
	}()
	br := bufio.NewReader(peer)
	keys := map[[4]byte]bool{}
	want := []struct {
		b0 byte
		p  []byte
	}{{0x81, []byte("hello")}, {0x82, big}, {0x89, []byte("p")}}
	for i := 0; i < 20; i++ {
		want = append(want, struct {
			b0 byte
			p  []byte
		}{0x81, []byte{'a' + byte(i)}})
	}
	for i, w := range want {
		f, err := readWireFrame(br)
		require.NoError(t, err)
		require.True(t, f.masked, "client frame %d must be masked (RFC 6455 §5.3)", i)
		require.Equal(t, w.b0, f.b0, "frame %d", i)
		require.True(t, bytes.Equal(w.p, f.payload), "frame %d payload", i)
		keys[f.key] = true
	}
	require.NoError(t, <-writeErr)
	require.Greater(t, len(keys), len(want)-3, "each frame has its own masking key")

	// Unmasked server frames are read; a fragmented message whose frames
	// are larger than half the read buffer is read straight into the
	// message.
	part := bytes.Repeat([]byte("x"), 1500)
	_, err := peer.Write(encodeFrame(0x81, []byte("hi"), false))
	require.NoError(t, err)
	require.Equal(t, []byte("hi"), h.waitMessage(t).data)
	for _, f := range [][]byte{encodeFrame(0x02, part, false), encodeFrame(0x00, part, false), encodeFrame(0x80, part, false)} {
		_, err := peer.Write(f)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond) // separate reads
	}
	require.Equal(t, bytes.Repeat(part, 3), h.waitMessage(t).data)

	// A masked server frame is a protocol error: the client closes with
	// 1002, in a masked close frame, and half-closes TCP.
	_, err = peer.Write(encodeFrame(0x81, []byte("masked"), true))
	require.NoError(t, err)
	f, err := readWireFrame(br)
	require.NoError(t, err)
	require.True(t, f.masked)
	require.Equal(t, byte(0x88), f.b0)
	require.Equal(t, StatusProtocolError, StatusCode(binary.BigEndian.Uint16(f.payload)))
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF)
	peer.Close()
	var pe *ProtocolError
	require.ErrorAs(t, h.waitClose(t), &pe)
	require.Equal(t, StatusProtocolError, pe.Code)
	require.Contains(t, pe.Reason, "masked")
}

func TestClientSideConnAnswersAndEndsOnClose(t *testing.T) {
	t.Parallel()
	peer, nc := tcpPair(t)
	h := newRecorder()
	c := newConn(plainConn{nc}, newConfig(Options{}, true), h, false, nil, "")
	go c.ReadLoop()
	_, err := peer.Write(append(encodeFrame(0x89, []byte("hb"), false), encodeFrame(0x88, closePayload(StatusGoingAway, "bye"), false)...))
	require.NoError(t, err)
	br := bufio.NewReader(peer)
	f, err := readWireFrame(br)
	require.NoError(t, err)
	require.Equal(t, byte(0x8A), f.b0)
	require.Equal(t, []byte("hb"), f.payload)
	f, err = readWireFrame(br)
	require.NoError(t, err)
	require.Equal(t, byte(0x88), f.b0)
	require.Equal(t, closePayload(StatusGoingAway, ""), f.payload)
	var ce *CloseError
	require.ErrorAs(t, h.waitClose(t), &ce)
	require.Equal(t, CloseError{Code: StatusGoingAway, Reason: "bye", ByPeer: true}, *ce)
}

func TestConnAccessorsAndDeadlines(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		type seen struct {
			local, netLocal, remote net.Addr
			proto                   string
			errs                    []error
		}
		got := make(chan seen, 1)
		h.open = func(c *Conn) {
			got <- seen{
				local: c.LocalAddr(), netLocal: c.NetConn().LocalAddr(), remote: c.RemoteAddr(),
				proto: c.Subprotocol(),
				errs: []error{
					c.SetDeadline(time.Time{}),
					c.SetWriteDeadline(time.Now().Add(time.Minute)),
					c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)), // a heartbeat that will not come
				},
			}
		}
		addr := m.serve(t, h, nil, func(u *Upgrader) { u.Subprotocols = []string{"chat"} })
		c := dialRaw(t, addr, nil, "Sec-WebSocket-Protocol: chat")
		s := <-got
		require.NoError(t, errors.Join(s.errs...))
		require.Equal(t, strings.TrimPrefix(addr, "tls://"), s.local.String())
		require.Equal(t, s.local, s.netLocal)
		require.Equal(t, c.nc.LocalAddr().String(), s.remote.String())
		require.Equal(t, "chat", s.proto)
		err := h.waitClose(t)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the read deadline ends the connection")
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		require.True(t, ne.Timeout())
	})
}

func TestReadLoopRunsOnce(t *testing.T) {
	t.Parallel()
	peer, nc := tcpPair(t)
	h := newRecorder()
	var c *Conn
	h.open = func(c *Conn) { c.ReadLoop() } // returns at once: the loop is running
	c = newConn(nc, newConfig(Options{}, true), h, true, nil, "")
	done := make(chan struct{})
	go func() { c.ReadLoop(); close(done) }()
	_, err := peer.Write(frame(0x82, []byte("x")))
	require.NoError(t, err)
	require.Equal(t, []byte("x"), h.waitMessage(t).data)
	peer.Close()
	require.ErrorIs(t, h.waitClose(t), io.EOF)
	<-done
	c.ReadLoop() // after the end: returns at once
	require.Equal(t, int32(1), h.opens.Load())
	require.Empty(t, h.closed, "OnClose once")
}

func TestPanicInOnCloseIsRecovered(t *testing.T) {
	t.Parallel()
	var logged testkit.Buffer
	h := &panicOnClose{newRecorder()}
	c := dialRaw(t, startServer(t, h, &Options{Logger: newLogger(&logged)}), nil)
	c.send(frame(0x88, nil))
	h.waitClose(t)
	require.Eventually(t, func() bool { return strings.Contains(logged.String(), "panic in OnClose") }, 5*time.Second, time.Millisecond)
	require.Contains(t, logged.String(), "panic=kaboom")
	require.Contains(t, logged.String(), "stack=")
}

// panicOnClose panics in OnClose, once it has recorded the call.
type panicOnClose struct{ *recorder }

func (h *panicOnClose) OnClose(c *Conn, err error) {
	h.recorder.OnClose(c, err)
	panic("kaboom")
}

// TestPanicCloseSurvivesUnreadBytes: a peer that sent more after the
// message that panicked reads the 1011 and then a clean end of stream, not
// the reset that closing the socket with its bytes unread would send (a
// reset that can destroy the 1011 itself on a real network): gust lingers
// after a panic as after a protocol error.
func TestPanicCloseSurvivesUnreadBytes(t *testing.T) {
	t.Parallel()
	forEachTCPModeParallel(t, func(t *testing.T, m serverMode) { panicCloseSurvivesUnreadBytes(t, m) })
}

func panicCloseSurvivesUnreadBytes(t *testing.T, m serverMode) {
	h := newRecorder()
	h.message = func(c *Conn, m *Message) { panic("boom") }
	addr := m.start(t, h, &Options{Logger: newLogger(io.Discard)})
	for range 5 {
		c := dialRaw(t, addr, nil)
		burst := frame(0x81, []byte("x"))
		for range 64 {
			burst = append(burst, encodeFrame(0x82, make([]byte, 4096), true)...)
		}
		go c.nc.Write(burst) // the server stops reading at the first frame
		b0, p, err := c.readFrame()
		require.NoError(t, err, "the 1011 was lost")
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, StatusInternalError, StatusCode(binary.BigEndian.Uint16(p)))
		c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "want a clean end of stream after the 1011")
		var pe *PanicError
		require.ErrorAs(t, h.waitClose(t), &pe)
	}
}

// TestConnSize: every connection holds a Conn for its whole life, idle or
// not; what only some connections use (a client's masking keys, a
// NextWriter's wait, heartbeats, Pings' waiters, the outbox, stored values)
// is allocated when used. 288 bytes is the size class it fills. In
// goroutine mode its read state comes with it (384 bytes in all); in
// netpoll mode the read state is pooled while the connection is parked,
// and the netpoll state (gust's own socket and the connection's place on
// its event loop) fills the 112-byte class.
func TestConnSize(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, unsafe.Sizeof(Conn{}), uintptr(288))
	require.LessOrEqual(t, unsafe.Sizeof(netpoll.Sock{}), uintptr(112))
}
