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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/testkit"
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
