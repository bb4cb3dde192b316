package gust

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/h2conn"
	"github.com/stretchr/testify/require"
)

// TestServerPendingHandshakeHeap opens connections that send the start of
// a request head and then nothing (slowloris), and checks that each one
// costs the Server far less heap than a full head buffer: a pending
// handshake holds a buffer the size of what it received, not of
// MaxHeaderBytes.
func TestServerPendingHandshakeHeap(t *testing.T) {
	const (
		conns = 200
		bound = 4 << 10 // heap per pending connection, client side included
	)
	s := newServer(newEcho(), nil) // MaxHeaderBytes 16 KiB, HandshakeTimeout 10s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cl := &firstReadListener{Listener: ln}
	done := make(chan error, 1)
	go func() { done <- s.Serve(cl) }()
	var ncs []net.Conn
	defer func() {
		for _, nc := range ncs {
			nc.Close()
		}
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	}()

	before := heapInuseNoPools()
	for range conns {
		nc, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		ncs = append(ncs, nc)
		_, err = io.WriteString(nc, "GET / HTTP/1.1\r\nHo")
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return cl.read.Load() == conns }, 10*time.Second, 5*time.Millisecond,
		"the Server read from every connection")
	after := heapInuseNoPools()

	per := (int64(after) - int64(before)) / conns
	t.Logf("heap in use: %d KiB before, %d KiB with %d pending handshakes: %d B each",
		before>>10, after>>10, conns, per)
	require.Less(t, per, int64(bound), "heap per pending handshake")
}

// heapInuseNoPools is HeapInuse once the buffer pools are empty: unlike
// heapInuse in leak_test.go it collects twice, since the first collection
// only moves pooled buffers to sync.Pool's victim cache, and a pool left
// full by earlier tests would hide the buffers the pending handshakes take.
func heapInuseNoPools() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// firstReadListener counts the accepted connections the Server has read
// bytes from.
type firstReadListener struct {
	net.Listener
	read atomic.Int64
}

func (l *firstReadListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &firstReadConn{Conn: nc, read: &l.read}, nil
}

type firstReadConn struct {
	net.Conn
	read    *atomic.Int64
	counted bool // only the Server's handshake goroutine reads
}

func (c *firstReadConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.counted {
		c.counted = true
		c.read.Add(1)
	}
	return n, err
}

// TestServerHandshakeHeadSizes sends heads of many sizes around the read
// buffer's growth steps and MaxHeaderBytes, each followed in the same
// write, or in pieces, by a frame: the head must be parsed whole, and the
// frame must reach the connection.
func TestServerHandshakeHeadSizes(t *testing.T) {
	t.Parallel()
	const maxHead = 3000 // not a power of two: the last growth stops short of a class size
	addr := startServerMaxHead(t, newEcho(), maxHead)
	base := len(handshakeRequest(addr, "X-Pad: "))
	for _, tt := range []struct {
		name   string
		size   int // of the head
		pieces int // writes the head and frame are cut into
		status int
	}{
		{"small", base, 1, 101},
		{"one byte short of the first buffer", 511, 1, 101},
		{"fills the first buffer", 512, 1, 101},
		{"one byte past the first buffer", 513, 1, 101},
		{"several growths", 2100, 1, 101},
		{"several growths in pieces", 2100, 7, 101},
		{"MaxHeaderBytes", maxHead, 1, 101},
		{"MaxHeaderBytes in pieces", maxHead, 5, 101},
		{"one byte over MaxHeaderBytes", maxHead + 1, 1, 431},
		{"one byte over MaxHeaderBytes in pieces", maxHead + 1, 5, 431},
	} {
		t.Run(tt.name, func(t *testing.T) {
			head := handshakeRequest(addr, "X-Pad: "+strings.Repeat("a", tt.size-base))
			require.Len(t, head, tt.size)
			msg := []byte("after the head")
			out := append([]byte(head), frame(0x81, msg)...)
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			step := (len(out) + tt.pieces - 1) / tt.pieces
			for len(out) > 0 {
				k := min(step, len(out))
				_, err := nc.Write(out[:k])
				require.NoError(t, err)
				out = out[k:]
				if len(out) > 0 {
					time.Sleep(5 * time.Millisecond) // let the Server read each piece on its own
				}
			}
			c := &rawClient{t: t, nc: nc, br: newBufReader(nc)}
			resp, err := http.ReadResponse(c.br, nil)
			require.NoError(t, err)
			require.Equal(t, tt.status, resp.StatusCode)
			if tt.status == 101 {
				c.expectMessage(OpText, msg)
			}
		})
	}
}

// TestServerHandshakeAcceptsEmptyBody checks that a Content-Length of 0,
// which announces no body, is not refused.
func TestServerHandshakeAcceptsEmptyBody(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		addr := m.start(t, newEcho(), nil)
		c := dialRaw(t, addr, frame(0x81, []byte("hi")), "Content-Length: 0")
		c.expectMessage(OpText, []byte("hi"))
	})
}

func TestServerRefusesMalformedAndHugeHeads(t *testing.T) {
	t.Parallel()
	h := newEcho()
	addr := startServerMaxHead(t, h, 1024)
	for _, tt := range []struct {
		req    string
		status int
	}{
		{"GARBAGE\r\n\r\n", 400},
		{"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431},
	} {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		c := &rawClient{t: t, nc: nc, br: newBufReader(nc)}
		resp := c.rawRequest(tt.req)
		require.Equal(t, tt.status, resp.StatusCode, tt.req[:min(len(tt.req), 20)])
		nc.Close()
	}
}

// startServerMaxHead serves h on a Server whose MaxHeaderBytes is n.
func startServerMaxHead(t *testing.T, h Event, n int) string {
	t.Helper()
	s := newServer(h, nil)
	s.MaxHeaderBytes = n
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runServer(t, s, ln)
	return ln.Addr().String()
}

// handshakeConn is a net.Conn that reads a handshake request and discards
// what is written to it.
type handshakeConn struct {
	r bytes.Reader
}

func (c *handshakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *handshakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *handshakeConn) Close() error                     { return nil }
func (c *handshakeConn) LocalAddr() net.Addr              { return h2conn.Addr("127.0.0.1:80") }
func (c *handshakeConn) RemoteAddr() net.Addr             { return h2conn.Addr("127.0.0.1:5000") }
func (c *handshakeConn) SetDeadline(time.Time) error      { return nil }
func (c *handshakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *handshakeConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkServerHandshake measures what a Server's handshake costs, from
// the request's bytes to the Conn, without OnRequest and with one.
func BenchmarkServerHandshake(b *testing.B) {
	req := []byte(handshakeRequest("gust.test", "Origin: http://gust.test", "Cookie: session=abc"))
	run := func(b *testing.B, s *Server) {
		b.ReportAllocs()
		nc := &handshakeConn{}
		for b.Loop() {
			nc.r.Reset(req)
			if c, _ := s.handshake(nc); c == nil {
				b.Fatal("handshake refused")
			}
		}
	}
	b.Run("plain", func(b *testing.B) { run(b, newServer(BuiltinEventHandler{}, nil)) })
	b.Run("OnRequest", func(b *testing.B) {
		s := newServer(BuiltinEventHandler{}, nil)
		s.Upgrader.OnRequest = func(r *http.Request, h http.Header, c *Conn) error {
			if ck, err := r.Cookie("session"); err == nil {
				c.Set("session", ck.Value)
			}
			return nil
		}
		run(b, s)
	})
}

// heapInuse is HeapInuse after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
