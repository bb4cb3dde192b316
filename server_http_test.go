package gust

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// plainMux is what a WebSocket service serves beside its connections: a
// health check, a Prometheus-style scrape, and an echo of a request body.
func plainMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, "# TYPE gust_connections gauge\ngust_connections 1\n")
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body) // all of it first: HTTP/1.1 is half duplex
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	})
	return mux
}

// startHTTPServer serves h's WebSockets and hh's other requests on one
// Server, in netpoll mode or not; set, if not nil, changes the Server
// before it serves.
func startHTTPServer(t *testing.T, netpoll bool, h Event, hh http.Handler, set func(*Server)) (string, *Server) {
	t.Helper()
	s := newServer(h, &Options{Netpoll: netpoll})
	s.HTTPHandler = hh
	if set != nil {
		set(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runServer(t, s, ln)
	return ln.Addr().String(), s
}

// forEachNetpoll runs f with the Server in goroutine mode and in netpoll
// mode.
func forEachNetpoll(t *testing.T, f func(t *testing.T, netpoll bool)) {
	for _, netpoll := range []bool{false, true} {
		t.Run(fmt.Sprintf("netpoll=%v", netpoll), func(t *testing.T) { f(t, netpoll) })
	}
}

// newTestClient is an HTTP client whose idle connections are closed when
// the test ends.
func newTestClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// dialPlain dials addr for raw HTTP requests.
func dialPlain(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestServerHTTPHandlerBesideWebSockets serves a health check and a scrape
// on the port of WebSocket connections, which go on working.
func TestServerHTTPHandlerBesideWebSockets(t *testing.T) {
	t.Parallel()
	forEachNetpoll(t, func(t *testing.T, netpoll bool) {
		t.Parallel()
		h := newEcho()
		addr, _ := startHTTPServer(t, netpoll, h, plainMux(), nil)
		ws := dialRaw(t, addr, nil)
		ws.send(frame(0x81, []byte("before")))
		ws.expectMessage(OpText, []byte("before"))

		client := newTestClient(t)
		resp, err := client.Get("http://" + addr + "/healthz")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "ok", readBody(t, resp))
		resp, err = client.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/plain; version=0.0.4", resp.Header.Get("Content-Type"))
		require.Contains(t, readBody(t, resp), "gust_connections 1\n")
		resp, err = client.Get("http://" + addr + "/nowhere")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "the handler's answer, not a handshake's")
		readBody(t, resp)

		ws.send(frame(0x81, []byte("after")))
		ws.expectMessage(OpText, []byte("after"))
		ws2 := dialRaw(t, addr, nil)
		ws2.send(frame(0x82, []byte("second")))
		ws2.expectMessage(OpBinary, []byte("second"))
	})
}

// TestServerHTTPUpgradeAttemptsStayWebSocket: a request that asks for a
// WebSocket, however badly, gets the handshake's answer, never the
// handler's.
func TestServerHTTPUpgradeAttemptsStayWebSocket(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	addr, _ := startHTTPServer(t, false, newRecorder(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
	}), nil)
	for _, tt := range []struct {
		req    string
		status int
		body   string
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
			http.StatusBadRequest, "missing or invalid Sec-WebSocket-Key"},
		{"POST / HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n\r\n",
			http.StatusMethodNotAllowed, "handshake method must be GET"},
		{"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
			http.StatusBadRequest, "Connection header must contain upgrade"},
		// A head gust's parser refuses is refused before it is known what
		// it asks for.
		{"GET / HTTP/1.1\nHost: x\r\n\r\n", http.StatusBadRequest, ""},
		{"GET / HTTP/2.0\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported, ""},
	} {
		c := dialPlain(t, addr)
		resp := c.rawRequest(tt.req)
		require.Equal(t, tt.status, resp.StatusCode, tt.req)
		require.Contains(t, readBody(t, resp), tt.body)
	}
	require.Zero(t, served.Load())
}

// TestServerHTTPKeepAlive: the requests that follow on the connection,
// pipelined or not, are net/http's (TestServerHTTPUpgradeAfterKeepAlive
// has one that asks for a WebSocket there).
func TestServerHTTPKeepAlive(t *testing.T) {
	t.Parallel()
	forEachNetpoll(t, func(t *testing.T, netpoll bool) {
		t.Parallel()
		addr, _ := startHTTPServer(t, netpoll, newRecorder(), plainMux(), nil)

		// net/http's client reuses the connection.
		client := newTestClient(t)
		var reused []bool
		for range 3 {
			trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = append(reused, ci.Reused) }}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://"+addr+"/healthz", nil)
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err)
			require.Equal(t, "ok", readBody(t, resp))
		}
		require.Equal(t, []bool{false, true, true}, reused)

		// Raw: one request, then two pipelined in one write.
		c := dialPlain(t, addr)
		resp := c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.Equal(t, "ok", readBody(t, resp))
		_, err := io.WriteString(c.nc, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		for _, want := range []string{"gust_connections 1\n", "ok"} {
			resp, err := http.ReadResponse(c.br, nil)
			require.NoError(t, err)
			require.Contains(t, readBody(t, resp), want)
		}
	})
}

// TestServerHTTPUpgradeAfterKeepAlive: a handshake on a connection net/http
// has served plain requests on (Node's fetch then WebSocket, aiohttp's
// session, a proxy's pooled upstream connection) is the Server's, as a
// first request is: answered 101, with a frame sent in the same write as
// the head kept, onto an event loop in netpoll mode, over TLS too, and
// closed with 1001 by Shutdown. The handler never sees it.
func TestServerHTTPUpgradeAfterKeepAlive(t *testing.T) {
	t.Parallel()
	cert, _ := testCert(t, "127.0.0.1")
	forEachNetpoll(t, func(t *testing.T, netpoll bool) {
		for _, secure := range []bool{false, true} {
			t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
				t.Parallel()
				var served atomic.Int32
				mux := plainMux()
				mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
					served.Add(1)
					http.NotFound(w, r)
				})
				h := newEcho()
				onLoop := make(chan bool, 1)
				h.open = func(c *Conn) { onLoop <- c.Netpoll() }
				s := newServer(h, &Options{Netpoll: netpoll})
				s.HTTPHandler = mux
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				done := make(chan error, 1)
				if secure {
					s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
					go func() { done <- s.ServeTLS(ln, "", "") }()
				} else {
					go func() { done <- s.Serve(ln) }()
				}
				nc, err := net.Dial("tcp", ln.Addr().String())
				require.NoError(t, err)
				defer nc.Close()
				if secure {
					nc = tls.Client(nc, &tls.Config{InsecureSkipVerify: true})
				}
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
				for range 2 {
					require.Equal(t, "ok", readBody(t, c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")))
				}
				req := handshakeRequest(ln.Addr().String()) + string(frame(0x81, []byte("kept")))
				resp := c.rawRequest(req)
				require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
				c.expectMessage(OpText, []byte("kept"))
				require.Equal(t, netpoll, <-onLoop, "served as a first request's connection is")
				c.send(frame(0x81, []byte("next")))
				c.expectMessage(OpText, []byte("next"))
				require.Zero(t, served.Load(), "the handler never saw the handshake")

				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				shut := make(chan error, 1)
				go func() { shut <- s.Shutdown(ctx) }()
				c.expectClose(StatusGoingAway)
				require.NoError(t, <-shut)
				require.ErrorIs(t, <-done, ErrServerClosed)
				require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
			})
		}
	})
}

// TestServerHTTPBodyReadAhead sends head and body in one write, so that
// the Server reads part of the body, or all of it, with the head: net/http
// must see those bytes.
func TestServerHTTPBodyReadAhead(t *testing.T) {
	t.Parallel()
	addr, _ := startHTTPServer(t, false, newRecorder(), plainMux(), nil)
	for _, n := range []int{10, 400, 3000, 64 << 10} {
		body := strings.Repeat("b", n-1) + "!"
		c := dialPlain(t, addr)
		resp := c.rawRequest(fmt.Sprintf("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", n, body))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		got := readBody(t, resp)
		require.Equal(t, len(body), len(got), n)
		require.True(t, body == got, n)
	}
	c := dialPlain(t, addr)
	resp := c.rawRequest("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	require.Equal(t, "hello world", readBody(t, resp))
}

// TestServerHTTPRequestSplitAcrossWrites sends a request, head and body,
// in pieces that arrive apart.
func TestServerHTTPRequestSplitAcrossWrites(t *testing.T) {
	t.Parallel()
	forEachNetpoll(t, func(t *testing.T, netpoll bool) {
		t.Parallel()
		addr, _ := startHTTPServer(t, netpoll, newRecorder(), plainMux(), nil)
		c := dialPlain(t, addr)
		for _, piece := range []string{"PO", "ST /echo HTTP/1.1\r\nHo", "st: x\r\nContent-Len", "gth: 11\r\n\r", "\nhello", " world"} {
			_, err := io.WriteString(c.nc, piece)
			require.NoError(t, err)
			time.Sleep(20 * time.Millisecond)
		}
		resp, err := http.ReadResponse(c.br, nil)
		require.NoError(t, err)
		require.Equal(t, "hello world", readBody(t, resp))
	})
}

// TestServerHTTPLimits: the Server's MaxHeaderBytes and HandshakeTimeout
// hold for the requests it hands to net/http, the first (read by the
// Server) and those that follow (read by net/http).
func TestServerHTTPLimits(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	addr, _ := startHTTPServer(t, false, newRecorder(), plainMux(), func(s *Server) {
		s.MaxHeaderBytes = 1024
		s.Upgrader.HandshakeTimeout = timeout
	})
	big := "X-Big: " + strings.Repeat("a", 16<<10) + "\r\n"

	t.Run("head over MaxHeaderBytes", func(t *testing.T) {
		t.Parallel()
		c := dialPlain(t, addr)
		resp := c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n" + big + "\r\n")
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
		// A later request's head, read by net/http, has the same bound
		// (give or take net/http's slack, up to 8 KiB).
		c = dialPlain(t, addr)
		require.Equal(t, "ok", readBody(t, c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")))
		resp = c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n" + big + "\r\n")
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})

	// slowloris sends the head of a request a byte every 50ms, and returns
	// how long the connection lasted.
	slowloris := func(t *testing.T, c *rawClient) time.Duration {
		start := time.Now()
		for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 100)) {
			if _, err := c.nc.Write([]byte{b}); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		io.ReadAll(c.br) // until the Server closes the connection
		return time.Since(start)
	}
	t.Run("slowloris on the first head", func(t *testing.T) {
		t.Parallel()
		lasted := slowloris(t, dialPlain(t, addr))
		require.Less(t, lasted, timeout+2*time.Second)
	})
	t.Run("slowloris on a later head", func(t *testing.T) {
		t.Parallel()
		c := dialPlain(t, addr)
		require.Equal(t, "ok", readBody(t, c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")))
		lasted := slowloris(t, c)
		require.Less(t, lasted, timeout+2*time.Second)
	})
	t.Run("idle connection", func(t *testing.T) {
		t.Parallel()
		c := dialPlain(t, addr)
		require.Equal(t, "ok", readBody(t, c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")))
		start := time.Now()
		_, err := c.br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
		require.Less(t, time.Since(start), timeout+2*time.Second)
	})
}

// TestServerHTTPHandlerNil: without HTTPHandler, a plain request is a
// failed handshake, as before.
func TestServerHTTPHandlerNil(t *testing.T) {
	t.Parallel()
	addr, _ := startHTTPServer(t, false, newRecorder(), nil, nil)
	c := dialPlain(t, addr)
	resp := c.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.True(t, resp.Close, "Connection: close")
}

// TestServerHTTPOverTLS: the handler sees the request's TLS state, which
// net/http cannot see through the connection it is handed, whether TLS
// comes from a listener of the caller's or from ServeTLS in netpoll mode
// (over the netpoll.Under, which then stays on its TCP connection).
func TestServerHTTPOverTLS(t *testing.T) {
	t.Parallel()
	cert, pool := testCert(t, "127.0.0.1")
	for _, netpoll := range []bool{false, true} {
		t.Run(fmt.Sprintf("ServeTLS=%v", netpoll), func(t *testing.T) {
			s := newServer(newEcho(), &Options{Netpoll: netpoll})
			s.HTTPHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.TLS == nil {
					http.Error(w, "no TLS state", http.StatusInternalServerError)
					return
				}
				fmt.Fprintf(w, "%v %s", r.TLS.HandshakeComplete, tls.VersionName(r.TLS.Version))
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			if netpoll {
				s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
				done := make(chan error, 1)
				go func() { done <- s.ServeTLS(ln, "", "") }()
				t.Cleanup(func() {
					require.NoError(t, s.Close())
					require.ErrorIs(t, <-done, ErrServerClosed)
				})
			} else {
				runServer(t, s, tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}))
			}
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
			defer tr.CloseIdleConnections()
			for range 2 { // the second on the same connection
				resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + ln.Addr().String() + "/")
				require.NoError(t, err)
				require.Equal(t, "true TLS 1.3", readBody(t, resp))
			}
		})
	}
}

// TestServerHTTPShutdown: Shutdown closes idle HTTP connections, waits for
// a request in progress, and cuts it when its context ends; Close cuts at
// once.
func TestServerHTTPShutdown(t *testing.T) {
	t.Parallel()
	// slow answers once release is closed, after telling started.
	slow := func(started chan<- struct{}, release <-chan struct{}) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-release
			io.WriteString(w, "done")
		})
	}

	t.Run("graceful", func(t *testing.T) {
		t.Parallel()
		started, release := make(chan struct{}, 1), make(chan struct{})
		mux := plainMux()
		mux.Handle("GET /slow", slow(started, release))
		h := newEcho()
		addr, s := startHTTPServer(t, false, h, mux, nil)
		ws := dialRaw(t, addr, nil)
		idle := dialPlain(t, addr)
		require.Equal(t, "ok", readBody(t, idle.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")))
		busy := dialPlain(t, addr)
		_, err := io.WriteString(busy.nc, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		<-started

		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		ws.expectClose(StatusGoingAway)
		_, err = idle.br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "an idle connection is closed")
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v with a request in progress", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		resp, err := http.ReadResponse(busy.br, nil)
		require.NoError(t, err)
		require.Equal(t, "done", readBody(t, resp))
		require.NoError(t, <-shut)
		require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
	})

	t.Run("context ends", func(t *testing.T) {
		t.Parallel()
		started, release := make(chan struct{}, 1), make(chan struct{})
		defer close(release)
		addr, s := startHTTPServer(t, false, newRecorder(), slow(started, release), nil)
		busy := dialPlain(t, addr)
		_, err := io.WriteString(busy.nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, s.Shutdown(ctx), context.DeadlineExceeded)
		_, err = busy.br.ReadByte()
		require.Error(t, err, "the connection is closed")
	})

	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		addr, s := startHTTPServer(t, false, newRecorder(), plainMux(), nil)
		idle := dialPlain(t, addr)
		require.Equal(t, "ok", readBody(t, idle.rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")))
		require.NoError(t, s.Close())
		_, err := idle.br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
	})
}
