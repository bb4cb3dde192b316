package gust

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gustws/gust/internal/h2conn"
	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestShutdownSendsGoingAway(t *testing.T) {
	t.Parallel()
	h := newEcho()
	s := newServer(h, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	clients := make([]*rawClient, 3)
	for i := range clients {
		clients[i] = dialRaw(t, ln.Addr().String(), nil)
		clients[i].send(frame(0x81, []byte("hi")))
		clients[i].expectMessage(OpText, []byte("hi"))
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for _, c := range clients {
		c.expectClose(StatusGoingAway)
	}
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-served, ErrServerClosed)
	for range clients {
		require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
	}
	require.ErrorIs(t, s.ListenAndServe("127.0.0.1:0"), ErrServerClosed)
}

func TestShutdownContextCutsSilentPeers(t *testing.T) {
	t.Parallel()
	h := newEcho()
	s := newServer(h, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go s.Serve(ln)
	dialRaw(t, ln.Addr().String(), nil) // never answers the close frame
	h.waitOpen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, h.waitClose(t), ErrServerClosed)
}

func TestServerRefusesRelativeTargetAndIgnoresHalfHeads(t *testing.T) {
	t.Parallel()
	h := newRecorder()
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
	t.Parallel()
	s := newServer(newRecorder(), nil) // HandshakeTimeout 10s
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

// TestCloseWhileAcceptingAConnection closes a Server while its listener
// hands over a connection, as a real listener may when a client connects
// at that moment. Close must not race the accept loop: the connection is
// closed unanswered, and Serve's bookkeeping for it is ordered with Close's
// wait for the connections.
func TestCloseWhileAcceptingAConnection(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	s := newServer(h, nil)
	ln := newFakeListener()
	peer, nc := tcpPair(t)
	ln.atClose = plainConn{peer}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	<-ln.accepting // Serve waits in Accept
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-served, ErrServerClosed)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := nc.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection is closed unanswered")
	require.Zero(t, h.opens.Load())
}

// fakeListener returns the errors in errs from Accept, then the conns sent
// on conns until Close; after Close it returns atClose, if set, once, as a
// listener does with a connection accepted as it closed.
type fakeListener struct {
	mu         sync.Mutex
	errs       []error
	atClose    net.Conn
	handed     chan struct{} // closed when Accept has returned atClose
	accepting  chan struct{} // closed when Accept is first called
	conns      chan net.Conn
	closed     chan struct{}
	once       sync.Once
	acceptOnce sync.Once
}

func (l *fakeListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.acceptOnce.Do(func() { close(l.accepting) })
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
// handed atClose over and its caller has had a moment to act on it: the
// sleep opens the window in which Serve races Close, it waits for no state.
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

func newFakeListener(errs ...error) *fakeListener {
	return &fakeListener{errs: errs, conns: make(chan net.Conn, 1), closed: make(chan struct{}),
		handed: make(chan struct{}), accepting: make(chan struct{})}
}

type tempError struct{ timeout bool }

func (e tempError) Error() string   { return fmt.Sprintf("fake accept error (timeout %v)", e.timeout) }
func (e tempError) Timeout() bool   { return e.timeout }
func (e tempError) Temporary() bool { return !e.timeout }

func TestServeBacksOffOnTemporaryAcceptErrors(t *testing.T) {
	t.Parallel()
	var logged testkit.Buffer
	s := newServer(newRecorder(), &Options{Logger: newLogger(&logged)})
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
		require.Contains(t, lines[i], `level=ERROR msg="gust: accept error; retrying"`)
		require.Regexp(t, `err="(wrapped: )?fake accept error`, lines[i])
		require.True(t, strings.HasSuffix(lines[i], "retry_in="+pause), lines[i])
	}
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-served, ErrServerClosed)
}

func TestServeReturnsPermanentAcceptErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("listener broke")
	s := newServer(newRecorder(), nil)
	require.ErrorIs(t, s.Serve(newFakeListener(boom)), boom)
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

func TestListenAndServeTLS(t *testing.T) {
	cert, pool := testCert(t, "127.0.0.1")
	certFile, keyFile := writeCert(t, t.TempDir(), cert)
	for _, viaConfig := range []bool{false, true} {
		t.Run(fmt.Sprintf("TLSConfig=%v", viaConfig), func(t *testing.T) {
			h := newEcho()
			var sawTLS atomic.Bool
			s := newServer(h, nil)
			s.Upgrader.CheckOrigin = func(r *http.Request) bool {
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

// tlsServerCert is one certificate for the tests' TLS servers, made once.
var tlsServerCert = sync.OnceValue(func() tls.Certificate {
	cert, _ := testCert(&testing.T{}, "127.0.0.1")
	return cert
})

// serveTLSServer serves a Server over TLS (ServeTLS) and returns its
// address as tls://host:port, which dialRaw dials with TLS.
func serveTLSServer(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
	t.Helper()
	s := newServer(h, opts)
	if set != nil {
		set(&s.Upgrader)
	}
	s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{tlsServerCert()}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	})
	return "tls://" + ln.Addr().String()
}

var tlsNetpollMode = serverMode{"server-tls-netpoll", "tls", inNetpoll(serveTLSServer)}

// dialTLS connects to a tls:// address and completes the handshake.
func dialTLS(t *testing.T, addr string, after []byte, headers ...string) *rawClient {
	t.Helper()
	addr = strings.TrimPrefix(addr, "tls://")
	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	require.NoError(t, err)
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: tc, br: bufio.NewReader(tc)}
	c.lastResp = c.rawRequest(handshakeRequest(addr, headers...))
	if len(after) > 0 {
		c.send(after)
	}
	return c
}

// dialNet connects to addr, with TLS for a tls:// address.
func dialNet(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := dialAddr(addr)
	require.NoError(t, err)
	return nc
}

// dialAddr is dialNet without a test.
func dialAddr(addr string) (net.Conn, error) {
	if host, ok := strings.CutPrefix(addr, "tls://"); ok {
		return tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true})
	}
	return net.Dial("tcp", addr)
}

// tcpOf returns the TCP connection under a client's connection, TLS or not.
func tcpOf(nc net.Conn) *net.TCPConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	return nc.(*net.TCPConn)
}

// ServeTLS serves TLS on a listener of the caller's, in either mode; a
// certificate it cannot load fails it, and closes the listener.
func TestServeTLS(t *testing.T) {
	for _, netpoll := range []bool{false, true} {
		h := newEcho()
		c := dialRaw(t, serveTLSServer(t, h, &Options{Netpoll: netpoll}, nil), nil)
		_, isTLS := h.waitOpen(t).NetConn().(*tls.Conn)
		require.True(t, isTLS)
		c.send(frame(0x81, []byte("over TLS")))
		c.expectMessage(OpText, []byte("over TLS"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := newServer(newEcho(), nil)
	require.ErrorIs(t, s.ServeTLS(ln, filepath.Join(t.TempDir(), "missing.pem"), "missing.key"), os.ErrNotExist)
	_, err = ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}
