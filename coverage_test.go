package gust

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/stretchr/testify/require"
)

// Tests of the paths the wire tests do not reach: the client side of a
// Conn, TLS, ListenAndServe*, accept errors, writes that fail, and the small
// accessors. Each checks what the path does, not only that it runs.

// covHandler records what happens on one connection.
type covHandler struct {
	BuiltinEventHandler
	open     func(c *Conn)
	messages chan []byte // copies of every message's data
	closed   chan error
	opens    atomic.Int32
}

func newCovHandler() *covHandler {
	return &covHandler{messages: make(chan []byte, 100), closed: make(chan error, 10)}
}

func (h *covHandler) OnOpen(c *Conn) {
	h.opens.Add(1)
	if h.open != nil {
		h.open(c)
	}
}

func (h *covHandler) OnMessage(_ *Conn, m *Message) {
	h.messages <- bytes.Clone(m.Data)
	m.Close()
}

func (h *covHandler) OnClose(_ *Conn, err error) { h.closed <- err }

func (h *covHandler) waitClose(t *testing.T) error {
	t.Helper()
	return waitErr(t, h.closed)
}

func (h *covHandler) waitMessage(t *testing.T) []byte {
	t.Helper()
	select {
	case m := <-h.messages:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("OnMessage was not called")
		return nil
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := ln.Accept()
		accepted <- nc
	}()
	nb, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	na := <-accepted
	require.NotNil(t, na)
	t.Cleanup(func() { na.Close(); nb.Close() })
	for _, nc := range []net.Conn{na, nb} {
		nc.SetDeadline(time.Now().Add(20 * time.Second))
	}
	return na.(*net.TCPConn), nb.(*net.TCPConn)
}

// plainConn hides the net.Conn's other methods (SyscallConn, CloseWrite),
// as a wrapped or non-TCP connection does.
type plainConn struct{ net.Conn }

// readWire reads one frame from r and returns it unmasked, with its key.
func readWire(t *testing.T, r io.Reader) (wireFrame, [4]byte) {
	t.Helper()
	var h [14]byte
	_, err := io.ReadFull(r, h[:2])
	require.NoError(t, err)
	f := wireFrame{b0: h[0], masked: h[1]&0x80 != 0}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		_, err = io.ReadFull(r, h[2:4])
		n = uint64(binary.BigEndian.Uint16(h[2:]))
	case 127:
		_, err = io.ReadFull(r, h[2:10])
		n = binary.BigEndian.Uint64(h[2:])
	}
	require.NoError(t, err)
	var key [4]byte
	if f.masked {
		_, err = io.ReadFull(r, key[:])
		require.NoError(t, err)
	}
	f.payload = make([]byte, n)
	_, err = io.ReadFull(r, f.payload)
	require.NoError(t, err)
	for i := range f.payload {
		f.payload[i] ^= key[i&3]
	}
	return f, key
}

func TestClientSideConnMasksWritesAndReadsUnmaskedFrames(t *testing.T) {
	peer, nc := tcpPair(t)
	h := newCovHandler()
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
		f, key := readWire(t, br)
		require.True(t, f.masked, "client frame %d must be masked (RFC 6455 §5.3)", i)
		require.Equal(t, w.b0, f.b0, "frame %d", i)
		require.True(t, bytes.Equal(w.p, f.payload), "frame %d payload", i)
		keys[key] = true
	}
	require.NoError(t, <-writeErr)
	require.Greater(t, len(keys), len(want)-3, "each frame has its own masking key")

	// Unmasked server frames are read; a fragmented message whose frames
	// are larger than half the read buffer is read straight into the
	// message.
	part := bytes.Repeat([]byte("x"), 1500)
	_, err := peer.Write(encodeFrame(0x81, []byte("hi"), false))
	require.NoError(t, err)
	require.Equal(t, []byte("hi"), h.waitMessage(t))
	for _, f := range [][]byte{encodeFrame(0x02, part, false), encodeFrame(0x00, part, false), encodeFrame(0x80, part, false)} {
		_, err := peer.Write(f)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond) // separate reads
	}
	require.Equal(t, bytes.Repeat(part, 3), h.waitMessage(t))

	// A masked server frame is a protocol error: the client closes with
	// 1002, in a masked close frame, and half-closes TCP.
	_, err = peer.Write(encodeFrame(0x81, []byte("masked"), true))
	require.NoError(t, err)
	f, _ := readWire(t, br)
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
	peer, nc := tcpPair(t)
	h := newCovHandler()
	c := newConn(plainConn{nc}, newConfig(Options{}, true), h, false, nil, "")
	go c.ReadLoop()
	_, err := peer.Write(append(encodeFrame(0x89, []byte("hb"), false), encodeFrame(0x88, closePayload(StatusGoingAway, "bye"), false)...))
	require.NoError(t, err)
	br := bufio.NewReader(peer)
	f, _ := readWire(t, br)
	require.Equal(t, byte(0x8A), f.b0)
	require.Equal(t, []byte("hb"), f.payload)
	f, _ = readWire(t, br)
	require.Equal(t, byte(0x88), f.b0)
	require.Equal(t, closePayload(StatusGoingAway, ""), f.payload)
	var ce *CloseError
	require.ErrorAs(t, h.waitClose(t), &ce)
	require.Equal(t, CloseError{Code: StatusGoingAway, Reason: "bye", ByPeer: true}, *ce)
}

func TestCorkedWritesFlushWhenTheBufferFills(t *testing.T) {
	h := newCovHandler()
	opts := &Options{WriteBufferSize: 1024}
	srv := newServer(&corkFiller{h}, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c := dialRaw(t, ln.Addr().String(), nil)
	c.send(frame(0x81, []byte("go")))
	for _, n := range []int{600, 600, 600, 5000, 10} {
		c.expectMessage(OpBinary, bytes.Repeat([]byte{byte(n)}, n))
	}
}

// corkFiller answers a message with writes that overflow the cork buffer,
// one of them larger than the buffer.
type corkFiller struct{ *covHandler }

func (h *corkFiller) OnMessage(c *Conn, m *Message) {
	m.Close()
	for _, n := range []int{600, 600, 600, 5000, 10} {
		if err := c.WriteMessage(OpBinary, bytes.Repeat([]byte{byte(n)}, n)); err != nil {
			panic(err)
		}
	}
}

func TestLargeFragmentedMessagesReadStraightIntoTheMessage(t *testing.T) {
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		c := dialRaw(t, m.start(t, h, &Options{ReadBufferSize: 512}), nil)
		var want []byte
		for i := 0; i < 4; i++ {
			p := bytes.Repeat([]byte{'a' + byte(i)}, 10<<10)
			want = append(want, p...)
			b0 := byte(0x00)
			if i == 0 {
				b0 = 0x01
			}
			if i == 3 {
				b0 |= 0x80
			}
			f := frame(b0, p)
			c.send(f[:20], f[20:]) // the header arrives before most of the payload
			time.Sleep(2 * time.Millisecond)
		}
		c.expectMessage(OpText, want)
	})
}

func TestConnAccessorsAndDeadlines(t *testing.T) {
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newCovHandler()
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
		require.Equal(t, addr, s.local.String())
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

func TestBuiltinEventHandler(t *testing.T) {
	var b BuiltinEventHandler
	m := newMessage(OpText, bufpool.Get(3), 3)
	b.OnMessage(nil, m)
	require.Nil(t, m.Data, "OnMessage releases the message")
	(*Message)(nil).Close() // does nothing

	// On the wire: pings are answered, pongs and messages ignored, the
	// close handshake completed.
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		c := dialRaw(t, m.start(t, BuiltinEventHandler{}, nil), nil)
		c.send(frame(0x81, []byte("ignored")), frame(0x8A, []byte("pong")), frame(0x89, []byte("ping")))
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x8A), b0, "the first answer is the pong: the message is not echoed")
		require.Equal(t, []byte("ping"), p)
		c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
		b0, p, err = c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, closePayload(StatusNormalClosure, ""), p)
		_, err = c.br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
	})
}

func TestReadLoopRunsOnce(t *testing.T) {
	peer, nc := tcpPair(t)
	h := newCovHandler()
	var c *Conn
	h.open = func(c *Conn) { c.ReadLoop() } // returns at once: the loop is running
	c = newConn(nc, newConfig(Options{}, true), h, true, nil, "")
	done := make(chan struct{})
	go func() { c.ReadLoop(); close(done) }()
	_, err := peer.Write(frame(0x82, []byte("x")))
	require.NoError(t, err)
	require.Equal(t, []byte("x"), h.waitMessage(t))
	peer.Close()
	require.ErrorIs(t, h.waitClose(t), io.EOF)
	<-done
	c.ReadLoop() // after the end: returns at once
	require.Equal(t, int32(1), h.opens.Load())
	require.Empty(t, h.closed, "OnClose once")
}

func TestWriteErrorsReachOnClose(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		h := newCovHandler()
		writeErr := make(chan error, 1)
		h.open = func(c *Conn) {
			c.SetWriteDeadline(time.Now().Add(-time.Second))
			writeErr <- c.WriteString("too late")
		}
		dialRaw(t, startServer(t, h, nil), nil)
		require.ErrorIs(t, <-writeErr, os.ErrDeadlineExceeded)
		require.ErrorIs(t, h.waitClose(t), os.ErrDeadlineExceeded, "OnClose gets the write error, not the read error it caused")
	})
	// A write corked during a callback fails when the read loop flushes it.
	for _, wrap := range []bool{false, true} {
		t.Run(fmt.Sprintf("corked/plainConn=%v", wrap), func(t *testing.T) {
			peer, nc := tcpPair(t)
			h := newCovHandler()
			var conn net.Conn = nc
			if wrap {
				conn = plainConn{nc} // reads through net.Conn.Read, not the netpoller
			}
			c := newConn(conn, newConfig(Options{}, true), &lateWriter{h}, true, nil, "")
			go c.ReadLoop()
			_, err := peer.Write(frame(0x81, []byte("x")))
			require.NoError(t, err)
			require.ErrorIs(t, h.waitClose(t), os.ErrDeadlineExceeded)
			require.ErrorIs(t, c.WriteString("after"), os.ErrDeadlineExceeded, "write errors are sticky")
		})
	}
}

// lateWriter writes its answer with a write deadline already past.
type lateWriter struct{ *covHandler }

func (h *lateWriter) OnMessage(c *Conn, m *Message) {
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if err := c.WriteMessage(m.Opcode, m.Data); err != nil {
		panic(fmt.Sprintf("a corked write does not reach the network: %v", err))
	}
	m.Close()
}

func TestMessagesAfterOurCloseAreDropped(t *testing.T) {
	h := newCovHandler()
	h.open = func(c *Conn) { c.Close(StatusNormalClosure, "") }
	c := dialRaw(t, startServer(t, h, nil), nil)
	b0, _, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x88), b0)
	c.send(frame(0x81, []byte("late")), frame(0x88, closePayload(StatusNormalClosure, "")))
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
	require.Empty(t, h.messages, "the browser API drops messages that arrive while closing")
}

func TestProtocolErrorAfterOurClose(t *testing.T) {
	h := newCovHandler()
	h.open = func(c *Conn) { c.Close(4000, "bye") }
	c := dialRaw(t, startServer(t, h, nil), nil)
	b0, p, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x88), b0)
	require.Equal(t, closePayload(4000, "bye"), p)
	c.send(frame(0xC1, []byte("rsv1")))
	var pe *ProtocolError
	require.ErrorAs(t, h.waitClose(t), &pe)
	require.Equal(t, StatusProtocolError, pe.Code)
	_, err = c.br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "no second close frame")
}

func TestPanicInOnCloseIsRecovered(t *testing.T) {
	var logged safeBuffer
	h := &panicOnClose{done: make(chan struct{})}
	c := dialRaw(t, startServer(t, h, &Options{ErrorLog: newLogger(&logged)}), nil)
	c.send(frame(0x88, nil))
	<-h.done
	require.Eventually(t, func() bool { return strings.Contains(logged.String(), "panic in OnClose") }, 5*time.Second, time.Millisecond)
	require.Contains(t, logged.String(), "kaboom")
}

type panicOnClose struct {
	BuiltinEventHandler
	done chan struct{}
}

func (h *panicOnClose) OnClose(*Conn, error) {
	close(h.done)
	panic("kaboom")
}

func TestPeerResetEndsTheConnection(t *testing.T) {
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newCovHandler()
		c := dialRaw(t, m.start(t, h, nil), nil)
		c.send(frame(0x82, []byte("one")))
		require.Equal(t, []byte("one"), h.waitMessage(t))
		require.NoError(t, c.nc.(*net.TCPConn).SetLinger(0))
		c.nc.Close()
		err := h.waitClose(t)
		require.ErrorIs(t, err, syscall.ECONNRESET)
		var oe *net.OpError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "read", oe.Op)
	})
}

func TestEOFInsidePayloadIsUnexpected(t *testing.T) {
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newCovHandler()
		c := dialRaw(t, m.start(t, h, nil), nil)
		f := frame(0x82, []byte("0123456789"))
		c.send(f[:len(f)-7])
		time.Sleep(5 * time.Millisecond)
		c.nc.(*net.TCPConn).CloseWrite()
		require.ErrorIs(t, h.waitClose(t), io.ErrUnexpectedEOF)
	})
}

// Upgrader paths.

func TestUpgradeWithoutHijacker(t *testing.T) {
	u := newUpgrader(newCovHandler(), nil)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header = http.Header{
		"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
	}
	w := httptest.NewRecorder()
	c, err := u.Upgrade(w, r)
	require.Nil(t, c)
	require.ErrorIs(t, err, http.ErrNotSupported)
	require.Equal(t, http.StatusInternalServerError, w.Code)

	// A refused handshake is a *HandshakeError that says why.
	r.Header.Set("Sec-Websocket-Version", "8")
	w = httptest.NewRecorder()
	_, err = u.Upgrade(w, r)
	var he *HandshakeError
	require.ErrorAs(t, err, &he)
	require.Equal(t, http.StatusUpgradeRequired, he.Status)
	require.Contains(t, he.Error(), "426")
	require.Equal(t, "13", w.Header().Get("Sec-WebSocket-Version"))
}

// unwrapWriter is middleware's ResponseWriter: it hides Hijack, but has
// Unwrap, as http.NewResponseController expects.
type unwrapWriter struct {
	http.ResponseWriter
	unwrap bool
}

func (w *unwrapWriter) Unwrap() http.ResponseWriter {
	if !w.unwrap {
		return nil
	}
	return w.ResponseWriter
}

func TestUpgradeBehindMiddleware(t *testing.T) {
	for _, unwrap := range []bool{true, false} {
		t.Run(fmt.Sprintf("Unwrap=%v", unwrap), func(t *testing.T) {
			h := newEcho()
			u := newUpgrader(h, nil)
			upgradeErr := make(chan error, 1)
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := u.Upgrade(&unwrapWriter{ResponseWriter: w, unwrap: unwrap}, r)
				upgradeErr <- err
				if err == nil {
					c.ReadLoop()
				}
			}))
			t.Cleanup(ts.Close)
			addr := ts.Listener.Addr().String()
			if unwrap {
				c := dialRaw(t, addr, nil)
				require.NoError(t, <-upgradeErr)
				c.send(frame(0x81, []byte("through middleware")))
				c.expectMessage(OpText, []byte("through middleware"))
				return
			}
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer nc.Close()
			c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
			resp := c.rawRequest(handshakeRequest(addr))
			require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
			require.ErrorIs(t, <-upgradeErr, http.ErrNotSupported)
		})
	}
}

func TestHandshakeRefusalsBothPaths(t *testing.T) {
	tests := []struct {
		name   string
		req    func(addr string) string
		status int
	}{
		{"HTTP/1.0", func(a string) string {
			return strings.Replace(handshakeRequest(a), "HTTP/1.1", "HTTP/1.0", 1)
		}, http.StatusBadRequest},
		{"unparsable Origin", func(a string) string {
			return handshakeRequest(a, "Origin: http://[::1")
		}, http.StatusForbidden},
	}
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newCovHandler()
		addr := m.start(t, h, nil)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				nc, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(5 * time.Second))
				c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
				resp := c.rawRequest(tt.req(addr))
				require.Equal(t, tt.status, resp.StatusCode)
			})
		}
		require.Zero(t, h.opens.Load())
	})
}

func TestNoCommonSubprotocol(t *testing.T) {
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newCovHandler()
		proto := make(chan string, 1)
		h.open = func(c *Conn) { proto <- c.Subprotocol() }
		addr := m.serve(t, h, nil, func(u *Upgrader) { u.Subprotocols = []string{"v2"} })
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer nc.Close()
		c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
		resp := c.rawRequest(handshakeRequest(addr, "Sec-WebSocket-Protocol: v1"))
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		require.Empty(t, resp.Header.Values("Sec-WebSocket-Protocol"))
		require.Equal(t, "", <-proto)
	})
}

// Server paths.

func TestServerRefusesRelativeTargetAndIgnoresHalfHeads(t *testing.T) {
	h := newCovHandler()
	addr := startServer(t, h, nil)

	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
	resp := c.rawRequest(strings.Replace(handshakeRequest(addr), "GET / ", "GET chat ", 1))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// A client that goes away in the middle of its request head gets no
	// answer and costs no OnOpen.
	nc2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc2.Close()
	nc2.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(nc2, "GET / HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	require.NoError(t, nc2.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(nc2)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Zero(t, h.opens.Load())
}

func TestCloseDropsHandshakesInProgress(t *testing.T) {
	s := newServer(newCovHandler(), nil) // HandshakeTimeout 10s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	nc, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending) == 1
	}, 5*time.Second, time.Millisecond)
	start := time.Now()
	require.NoError(t, s.Close())
	require.Less(t, time.Since(start), 5*time.Second, "Close does not wait for the handshake timeout")
	require.ErrorIs(t, <-served, ErrServerClosed)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = nc.Read(make([]byte, 1))
	require.Error(t, err)

	// A closed Server serves no more listeners, and closes them.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.ErrorIs(t, s.Serve(ln2), ErrServerClosed)
	_, err = ln2.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, s.ListenAndServeTLS("127.0.0.1:0", "", ""), ErrServerClosed)
}

// fakeListener returns the errors in errs from Accept, then the conns sent
// on conns until Close; after Close it returns atClose, if set, once, as a
// listener does with a connection accepted as it closed.
type fakeListener struct {
	mu      sync.Mutex
	errs    []error
	atClose net.Conn
	handed  chan struct{} // closed when Accept has returned atClose
	conns   chan net.Conn
	closed  chan struct{}
	once    sync.Once
}

func newFakeListener(errs ...error) *fakeListener {
	return &fakeListener{errs: errs, conns: make(chan net.Conn, 1), closed: make(chan struct{}),
		handed: make(chan struct{})}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.closed:
		l.mu.Lock()
		defer l.mu.Unlock()
		if nc := l.atClose; nc != nil {
			l.atClose = nil
			close(l.handed)
			return nc, nil
		}
		return nil, net.ErrClosed
	}
}

// Close stops Accept. With atClose set, it returns only once Accept has
// handed atClose over and its caller has had a moment to act on it.
func (l *fakeListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.mu.Lock()
		wait := l.atClose != nil
		l.mu.Unlock()
		if wait {
			<-l.handed
			time.Sleep(20 * time.Millisecond)
		}
	})
	return nil
}

func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

type tempError struct{ timeout bool }

func (e tempError) Error() string   { return fmt.Sprintf("fake accept error (timeout %v)", e.timeout) }
func (e tempError) Timeout() bool   { return e.timeout }
func (e tempError) Temporary() bool { return !e.timeout }

func TestServeBacksOffOnTemporaryAcceptErrors(t *testing.T) {
	var logged safeBuffer
	s := newServer(newCovHandler(), &Options{ErrorLog: newLogger(&logged)})
	ln := newFakeListener(tempError{}, tempError{timeout: true}, fmt.Errorf("wrapped: %w", tempError{}))
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	// A connection accepted after the errors is served.
	peer, nc := tcpPair(t)
	ln.conns <- plainConn{peer}
	c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
	resp := c.rawRequest(handshakeRequest("x"))
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)

	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	require.Len(t, lines, 3, "%s", logged.String())
	for i, pause := range []string{"5ms", "10ms", "20ms"} {
		require.Contains(t, lines[i], "accept error")
		require.True(t, strings.HasSuffix(lines[i], "retrying in "+pause), lines[i])
	}
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-served, ErrServerClosed)
}

func TestServeReturnsPermanentAcceptErrors(t *testing.T) {
	boom := errors.New("listener broke")
	s := newServer(newCovHandler(), nil)
	require.ErrorIs(t, s.Serve(newFakeListener(boom)), boom)
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for ListenAndServe*, which choose no port of their own.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// listenAndServe runs serve on a free address, retrying when another
// process took the port first, and returns the address once it accepts.
func listenAndServe(t *testing.T, s *Server, serve func(addr string) error) (addr string, served chan error) {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		addr = freeAddr(t)
		served = make(chan error, 1)
		go func() { served <- serve(addr) }()
		if waitListening(t, addr, served) {
			return addr, served
		}
	}
	t.Fatal("no free port")
	return "", nil
}

// waitListening reports whether addr accepts connections before serve ends
// with "address in use".
func waitListening(t *testing.T, addr string, served chan error) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-served:
			require.ErrorIs(t, err, syscall.EADDRINUSE)
			return false
		default:
		}
		if nc, err := net.Dial("tcp", addr); err == nil {
			nc.Close()
			return true
		}
	}
	t.Fatalf("nothing listens on %s", addr)
	return false
}

func TestListenAndServe(t *testing.T) {
	h := newEcho()
	s := newServer(h, nil)
	addr, served := listenAndServe(t, s, s.ListenAndServe)
	c := dialRaw(t, addr, nil)
	c.send(frame(0x81, []byte("plain")))
	c.expectMessage(OpText, []byte("plain"))
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-served, ErrServerClosed)
	require.ErrorIs(t, h.waitClose(t), ErrServerClosed)

	require.Error(t, newServer(h, nil).ListenAndServe("127.0.0.1:-1"))
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, cert tls.Certificate, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "gust test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	parsed, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return certFile, keyFile, cert, pool
}

func TestListenAndServeTLS(t *testing.T) {
	certFile, keyFile, cert, pool := selfSigned(t, t.TempDir())
	for _, viaConfig := range []bool{false, true} {
		t.Run(fmt.Sprintf("TLSConfig=%v", viaConfig), func(t *testing.T) {
			h := newEcho()
			var sawTLS atomic.Bool
			s := newServer(h, nil)
			s.CheckOrigin = func(r *http.Request) bool {
				sawTLS.Store(r.TLS != nil && r.TLS.HandshakeComplete)
				return true
			}
			cf, kf := certFile, keyFile
			if viaConfig {
				s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
				cf, kf = "", ""
			}
			addr, served := listenAndServe(t, s, func(addr string) error { return s.ListenAndServeTLS(addr, cf, kf) })

			tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
			require.NoError(t, err)
			defer tc.Close()
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			c := &rawClient{t: t, nc: tc, br: bufio.NewReader(tc)}
			resp := c.rawRequest(handshakeRequest(addr))
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			require.True(t, sawTLS.Load(), "CheckOrigin sees the request's TLS state")
			p := bytes.Repeat([]byte("secret "), 10<<10) // over the write buffer
			c.send(frame(0x82, p))
			c.expectMessage(OpBinary, p)
			c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
			b0, _, err := c.readFrame()
			require.NoError(t, err)
			require.Equal(t, byte(0x88), b0)
			require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))

			require.NoError(t, s.Close())
			require.ErrorIs(t, <-served, ErrServerClosed)
		})
	}
	s := newServer(newEcho(), nil)
	require.ErrorIs(t, s.ListenAndServeTLS("127.0.0.1:0", filepath.Join(t.TempDir(), "missing.pem"), keyFile), os.ErrNotExist)
	require.Error(t, s.ListenAndServeTLS("127.0.0.1:-1", certFile, keyFile))
}

// TestCloseWhileAcceptingAConnection closes a Server while its listener
// hands over a connection, as a real listener may when a client connects
// at that moment. Close must not race the accept loop: the connection is
// closed unanswered, and Serve's bookkeeping for it is ordered with Close's
// wait for the connections.
func TestCloseWhileAcceptingAConnection(t *testing.T) {
	h := newCovHandler()
	s := newServer(h, nil)
	ln := newFakeListener()
	peer, nc := tcpPair(t)
	ln.atClose = plainConn{peer}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	time.Sleep(10 * time.Millisecond) // Serve waits in Accept
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-served, ErrServerClosed)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := nc.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection is closed unanswered")
	require.Zero(t, h.opens.Load())
}

// forEachTCPMode runs f over the server modes whose clients speak
// WebSocket straight over a TCP connection to the address: the tests that
// use it dial, reset or half-close that connection themselves.
func forEachTCPMode(t *testing.T, f func(t *testing.T, m serverMode)) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		if m.name != "upgrader" && m.name != "server" {
			t.Skipf("mode %s: the test needs a plain TCP connection", m.name)
		}
		f(t, m)
	})
}

// patterned is n bytes that differ from their neighbours, so that a piece
// written twice, skipped or out of place changes the message.
func patterned(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i/251)
	}
	return p
}

func TestLargeServerFramesGoOutWholeThroughTheWriteBuffer(t *testing.T) {
	for _, size := range []int{1024, 4096, 64 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			h := newCovHandler()
			srv := newServer(&patternWriter{h}, &Options{WriteBufferSize: size})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })

			c := dialRaw(t, ln.Addr().String(), nil)
			for _, n := range []int{size + 1, 3*size - 5, 200003} {
				c.send(frame(0x82, []byte(fmt.Sprint(n))))
				c.expectMessage(OpBinary, patterned(n))
			}
		})
	}
}

// patternWriter answers a message naming a size with patterned(size).
type patternWriter struct{ *covHandler }

func (h *patternWriter) OnMessage(c *Conn, m *Message) {
	n, err := strconv.Atoi(string(m.Data))
	m.Close()
	if err != nil {
		panic(err)
	}
	if err := c.WriteMessage(OpBinary, patterned(n)); err != nil {
		panic(err)
	}
}
