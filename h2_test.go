package gust

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/h2conn"
	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// The HTTP/2 tests need Go's server to offer extended CONNECT, which it does
// only when the process starts with GODEBUG=http2xconnect=1: TestMain
// re-runs the test binary with it (see main_test.go).

// h2Servers maps the address startH2 returns to the client that reaches it.
var h2Servers sync.Map // string → *h2Server

type h2Server struct {
	client  *http.Client
	url     string
	accepts atomic.Int32

	once sync.Once
	rt   http.RoundTripper
}

// roundTripper returns an HTTP/2 RoundTripper on one TLS connection to the
// server. http.Transport refuses the :protocol pseudo-header that an
// extended CONNECT needs; the HTTP/2 transport it hands TLS connections to
// (TLSNextProto["h2"]) takes it.
func (s *h2Server) roundTripper(t *testing.T) http.RoundTripper {
	s.once.Do(func() {
		tr := s.client.Transport.(*http.Transport)
		tr.CloseIdleConnections() // sets up TLSNextProto
		next := tr.TLSNextProto["h2"]
		require.NotNil(t, next, "the transport speaks no HTTP/2")
		cfg := tr.TLSClientConfig.Clone()
		cfg.NextProtos = []string{"h2"}
		host := strings.TrimPrefix(s.url, "https://")
		tc, err := tls.Dial("tcp", host, cfg)
		require.NoError(t, err)
		require.Equal(t, "h2", tc.ConnectionState().NegotiatedProtocol)
		s.rt = next(host, tc)
	})
	return s.rt
}

// countingListener counts the TCP connections a server accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startH2 serves the Upgrader over HTTPS with HTTP/2 and returns an address
// that dialRaw recognises.
func startH2(t *testing.T, h Event, opts *Options) string {
	t.Helper()
	return serveH2(t, h, opts, nil)
}

func serveH2(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
	t.Helper()
	u := newUpgrader(h, opts)
	if set != nil {
		set(u)
	}
	srv := &h2Server{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		c, err := u.Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
	}))
	ts.Listener = countingListener{Listener: ts.Listener, n: &srv.accepts}
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	srv.client = ts.Client()
	srv.url = ts.URL
	addr := "h2://" + ts.Listener.Addr().String()
	h2Servers.Store(addr, srv)
	t.Cleanup(func() { h2Servers.Delete(addr) })
	return addr
}

// streamConn2 is a net.Conn over an HTTP/2 request body (writes) and
// response body (reads), for rawClient.
type h2ClientStream struct {
	io.Reader
	w      *io.PipeWriter
	body   io.Closer
	cancel context.CancelFunc
}

func (s *h2ClientStream) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *h2ClientStream) Close() error {
	s.w.Close()
	s.cancel()
	return s.body.Close()
}
func (s *h2ClientStream) LocalAddr() net.Addr              { return h2conn.Addr("client") }
func (s *h2ClientStream) RemoteAddr() net.Addr             { return h2conn.Addr("server") }
func (s *h2ClientStream) SetDeadline(time.Time) error      { return nil }
func (s *h2ClientStream) SetReadDeadline(time.Time) error  { return nil }
func (s *h2ClientStream) SetWriteDeadline(time.Time) error { return nil }

// dialH2 opens a WebSocket as an extended CONNECT stream (RFC 8441).
func dialH2(t *testing.T, addr string, after []byte, headers ...string) *rawClient {
	t.Helper()
	v, ok := h2Servers.Load(addr)
	require.True(t, ok)
	srv := v.(*h2Server)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodConnect, srv.url+"/ws", pr)
	require.NoError(t, err)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	resp, err := srv.roundTripper(t).RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 2, resp.ProtoMajor)
	s := &h2ClientStream{Reader: resp.Body, w: pw, body: resp.Body, cancel: cancel}
	t.Cleanup(func() { s.Close() })
	c := &rawClient{t: t, nc: s, br: bufio.NewReader(s), lastResp: resp}
	if len(after) > 0 {
		c.send(after)
	}
	return c
}

var h2Mode = serverMode{"h2", "h2", serveH2}

// frameModes are the ways to reach a gust server that frame-level tests
// run over: both HTTP/1.1 paths and an HTTP/2 stream.
var frameModes = append(serverModes[:len(serverModes):len(serverModes)], h2Mode)

func forEachFrameMode(t *testing.T, f func(t *testing.T, m serverMode)) {
	for _, m := range frameModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

func TestH2ManyWebSocketsOnOneConnection(t *testing.T) {
	t.Parallel()
	h := newEcho()
	addr := startH2(t, h, &Options{Compression: CompressionOptions{Enabled: true}})
	var clients []*rawClient
	for i := 0; i < 5; i++ {
		c := dialH2(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate")
		require.Contains(t, c.lastResp.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate")
		clients = append(clients, c)
	}
	big := repeat("b", 1<<20)
	for i, c := range clients {
		msg := []byte(strings.Repeat("x", i+1))
		c.send(frame(0x81, msg))
		c.expectMessage(OpText, msg) // under the threshold: not compressed
		c.send(frame(0x82, big))
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0xC2), b0)
		require.Equal(t, big, testkit.NewDeflatePeer().Decompress(t, p))
	}
	for _, c := range clients {
		c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
		c.expectClose(StatusNormalClosure)
	}
	for range clients {
		require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
	}
	v, _ := h2Servers.Load(addr)
	require.Equal(t, int32(1), v.(*h2Server).accepts.Load(), "five WebSockets, one TCP connection")
}

func TestH2StreamResetEndsConnOnce(t *testing.T) {
	t.Parallel()
	h := newEcho()
	addr := startH2(t, h, nil)
	c := dialH2(t, addr, nil)
	c.send(frame(0x81, []byte("hi")))
	c.expectMessage(OpText, []byte("hi"))
	c.nc.Close() // cancels the request: the client resets the stream
	err := h.waitClose(t)
	require.Error(t, err)
	select {
	case err := <-h.closed:
		t.Fatalf("OnClose called twice, again with %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestH2RefusesPlainRequests(t *testing.T) {
	t.Parallel()
	h := newEcho()
	addr := startH2(t, h, nil)
	v, _ := h2Servers.Load(addr)
	srv := v.(*h2Server)
	u := newUpgrader(h, nil)
	for _, tt := range []struct {
		method, protocol string
		status           int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodConnect, "", http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(tt.method, srv.url+"/ws", nil)
		r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
		if tt.protocol != "" {
			r.Header.Set(":protocol", tt.protocol)
		}
		r.Header.Set("Sec-WebSocket-Version", "13")
		_, err := u.Upgrade(rec, r)
		require.Error(t, err)
		require.Equal(t, tt.status, rec.Code)
	}
}
