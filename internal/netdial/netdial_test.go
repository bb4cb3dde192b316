package netdial

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
	"github.com/gustws/gust/internal/netpoll"
	"github.com/gustws/gust/internal/selfsigned"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/internal/netdial"))
}

// The root package's tests dial real servers and proxies through Dial;
// these run Open, guard and Failed against one-connection servers.

// serve accepts one connection on loopback and runs handle on it, then
// closes it; the test waits for handle when it ends.
func serve(t *testing.T, handle func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		handle(nc)
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// recorded is a net.Conn that records its deadlines and its closing.
type recorded struct {
	net.Conn
	mu        sync.Mutex
	deadlines []time.Time
	closed    atomic.Bool
}

func (c *recorded) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines = append(c.deadlines, t)
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *recorded) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (c *recorded) Deadlines() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.deadlines...)
}

// dialTo returns a NetDial that connects to addr whatever it is asked
// for, records the address it was asked for, and wraps the connection.
func dialTo(addr string, asked *string, conn **recorded) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, a string) (net.Conn, error) {
		*asked = a
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		*conn = &recorded{Conn: nc}
		return *conn, nil
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func TestGuardReleased(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer b.Close()
	nc := &recorded{Conn: a}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	dl, _ := ctx.Deadline()
	release := guard(ctx, nc)
	require.Equal(t, []time.Time{dl}, nc.Deadlines(), "ctx's deadline is set on the connection")
	require.NoError(t, release())
	require.Equal(t, []time.Time{dl, {}}, nc.Deadlines(), "release clears it")
	cancel()
	time.Sleep(10 * time.Millisecond)
	require.False(t, nc.closed.Load(), "ctx no longer matters after release")
}

func TestGuardFired(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer b.Close()
	nc := &recorded{Conn: a}
	ctx, cancel := context.WithCancel(context.Background())
	release := guard(ctx, nc)
	require.Empty(t, nc.Deadlines(), "no deadline without one on ctx")
	read := make(chan error, 1)
	go func() {
		_, err := nc.Read(make([]byte, 1))
		read <- err
	}()
	cancel()
	require.ErrorIs(t, <-read, io.ErrClosedPipe, "ending ctx closes the connection")
	require.True(t, nc.closed.Load())
	require.ErrorIs(t, release(), context.Canceled)
}

func TestFailed(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	live := context.Background()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

	require.Same(t, boom, Failed(live, boom), "a live ctx adds nothing")

	err := Failed(canceled, boom)
	require.EqualError(t, err, "context canceled: boom")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, boom)

	already := fmt.Errorf("dialing: %w", context.Canceled)
	require.Same(t, already, Failed(canceled, already), "ctx's error is not added twice")

	// The connection's deadline is ctx's: its passing is ctx's.
	err = Failed(live, timeout)
	require.EqualError(t, err, "context deadline exceeded: read tcp: i/o timeout")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	wrapped := fmt.Errorf("%w: %w", context.DeadlineExceeded, timeout)
	require.Same(t, wrapped, Failed(live, wrapped))
}

func TestOpenPlain(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	addr := serve(t, func(nc net.Conn) {
		line, _ := bufio.NewReader(nc).ReadString('\n')
		got <- line
	})
	var asked string
	var conn *recorded
	d := &Dialer{NetDial: dialTo(addr, &asked, &conn)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, raw, release, err := d.Open(ctx, mustURL(t, "ws://example.com/chat"))
	require.NoError(t, err)
	defer nc.Close()
	require.Equal(t, "example.com:80", asked, "the URL's host, with ws's port")
	require.Same(t, conn, nc)
	require.Same(t, conn, raw)
	_, err = io.WriteString(nc, "hello\n")
	require.NoError(t, err)
	require.Equal(t, "hello\n", <-got)
	require.NoError(t, release())
}

func TestOpenProxy(t *testing.T) {
	t.Parallel()
	connect := make(chan string, 1)
	addr := serve(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		req, err := http.ReadRequest(br)
		if err != nil {
			connect <- err.Error()
			return
		}
		connect <- req.Method + " " + req.Host
		io.WriteString(nc, "HTTP/1.1 200 Connection established\r\n\r\n")
		io.Copy(io.Discard, br)
	})
	var asked string
	var conn *recorded
	var seen *http.Request
	header := http.Header{"Origin": {"https://a.example"}}
	d := &Dialer{NetDial: dialTo(addr, &asked, &conn), Header: header,
		Proxy: func(r *http.Request) (*url.URL, error) {
			seen = r
			return mustURL(t, "http://proxy.example:3128"), nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, raw, release, err := d.Open(ctx, mustURL(t, "ws://example.com:8080/chat"))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, release())
	require.Equal(t, "proxy.example:3128", asked, "the proxy is dialed")
	require.Equal(t, "CONNECT example.com:8080", <-connect, "for a tunnel to the server")
	require.Same(t, conn, raw)
	require.Equal(t, "http://example.com:8080/chat", seen.URL.String(), "Proxy sees http for ws")
	require.Equal(t, "example.com:8080", seen.Host)
	require.Equal(t, header, seen.Header)
	require.Equal(t, ctx, seen.Context())
}

func TestOpenProxyRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dialed := false
	netDial := func(context.Context, string, string) (net.Conn, error) {
		dialed = true
		return nil, errors.New("dialed")
	}
	var scheme string
	d := &Dialer{NetDial: netDial, Proxy: func(r *http.Request) (*url.URL, error) {
		scheme = r.URL.Scheme
		return nil, errors.New("no proxy today")
	}}
	_, _, _, err := d.Open(ctx, mustURL(t, "wss://example.com/"))
	require.EqualError(t, err, "choosing a proxy: no proxy today")
	require.Equal(t, "https", scheme, "Proxy sees https for wss")

	d.Proxy = func(*http.Request) (*url.URL, error) { return mustURL(t, "ftp://proxy.example"), nil }
	_, _, _, err = d.Open(ctx, mustURL(t, "ws://example.com/"))
	require.ErrorContains(t, err, `unsupported scheme "ftp"`)
	require.False(t, dialed)
}

// tlsServer serves TLS with a certificate for gust.test, offering h2 and
// http/1.1, and returns its address and a pool that trusts it.
func tlsServer(t *testing.T, proto chan<- string) (string, *x509.CertPool) {
	t.Helper()
	cert, err := selfsigned.Cert(nil, "gust.test")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	addr := serve(t, func(nc net.Conn) {
		tc := tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
		if tc.Handshake() != nil {
			proto <- ""
			return
		}
		proto <- tc.ConnectionState().NegotiatedProtocol
		io.Copy(io.Discard, tc)
	})
	return addr, pool
}

func TestOpenTLS(t *testing.T) {
	t.Parallel()
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprint("HTTP2=", http2), func(t *testing.T) {
			t.Parallel()
			proto := make(chan string, 1)
			addr, pool := tlsServer(t, proto)
			var asked string
			var conn *recorded
			cfg := &tls.Config{RootCAs: pool}
			d := &Dialer{NetDial: dialTo(addr, &asked, &conn), TLSConfig: cfg, HTTP2: http2}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			nc, raw, release, err := d.Open(ctx, mustURL(t, "wss://gust.test/"))
			require.NoError(t, err, "ServerName is the URL's host")
			defer nc.Close()
			require.NoError(t, release())
			require.Equal(t, "gust.test:443", asked)
			require.Same(t, conn, raw)
			tc := nc.(*tls.Conn)
			require.NotNil(t, netpoll.UnderOf(tc), "TLS runs over an Under")
			want := "http/1.1"
			if http2 {
				want = "h2"
			}
			require.Equal(t, want, tc.ConnectionState().NegotiatedProtocol)
			require.Equal(t, want, <-proto)
			require.Empty(t, cfg.ServerName, "the caller's config is copied")
			require.Empty(t, cfg.NextProtos)
		})
	}
}

func TestOpenTLSFails(t *testing.T) {
	t.Parallel()
	proto := make(chan string, 1)
	addr, _ := tlsServer(t, proto)
	var asked string
	var conn *recorded
	d := &Dialer{NetDial: dialTo(addr, &asked, &conn)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, _, err := d.Open(ctx, mustURL(t, "wss://gust.test/"))
	var unknown x509.UnknownAuthorityError
	require.ErrorAs(t, err, &unknown, "the system roots do not hold the test's")
	require.True(t, conn.closed.Load(), "the connection is closed")
}

func TestOpenTLSTimeout(t *testing.T) {
	t.Parallel()
	addr := serve(t, func(nc net.Conn) { io.Copy(io.Discard, nc) }) // never answers
	var asked string
	var conn *recorded
	d := &Dialer{NetDial: dialTo(addr, &asked, &conn)}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, _, err := d.Open(ctx, mustURL(t, "wss://gust.test/"))
	require.ErrorIs(t, err, context.DeadlineExceeded, "Failed adds ctx's error")
	require.True(t, conn.closed.Load(), "the connection is closed")
}
