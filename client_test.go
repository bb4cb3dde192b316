package gust

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/handshake"
	"github.com/stretchr/testify/require"
)

// The client tests dial gust servers (both paths), raw servers written from
// RFC 6455 for the answers a gust server never gives, and go through real
// proxies started on loopback (proxy_test.go).

// runClient runs c's ReadLoop until the test ends; then it closes c
// cleanly and waits for the loop to return.
func runClient(t *testing.T, c *Conn) {
	done := make(chan struct{})
	go func() {
		c.ReadLoop()
		close(done)
	}()
	t.Cleanup(func() {
		c.Close(StatusNormalClosure, "")
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.NetConn().Close()
			<-done
		}
	})
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialTest dials url, requires success and runs the client.
func dialTest(t *testing.T, url string, opts *DialOptions) (*Conn, *http.Response, *recorder) {
	t.Helper()
	h := newRecorder()
	c, resp, err := Dial(testContext(t), url, h, opts)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	runClient(t, c)
	return c, resp, h
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestDialEcho(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		srv := newEcho()
		addr := m.start(t, srv, nil)
		c, resp, h := dialTest(t, "ws://"+addr+"/echo?room=1", nil)
		require.False(t, c.Compressed())
		require.Empty(t, c.Subprotocol())
		require.NotEmpty(t, resp.Header.Get("Sec-WebSocket-Accept"))
		require.Equal(t, "/echo?room=1", resp.Request.URL.RequestURI())

		bigText := []byte(strings.Repeat("héllo wörld!!!", 65536)) // 16 bytes × 64 Ki: 1 MiB of UTF-8
		require.Len(t, bigText, 1<<20)
		cases := []struct {
			op   Opcode
			data []byte
		}{
			{OpText, []byte("hello")},
			{OpBinary, []byte{0, 1, 2, 0xff}},
			{OpText, nil},
			{OpBinary, randomBytes(125)},
			{OpBinary, randomBytes(126)},
			{OpBinary, randomBytes(65536)},
			{OpBinary, randomBytes(1 << 20)},
			{OpText, bigText},
		}
		for _, tc := range cases {
			require.NoError(t, c.WriteMessage(tc.op, tc.data))
			h.expectMessage(t, tc.op, tc.data)
		}
		require.NoError(t, c.Close(4000, "bye"))
		var ce *CloseError
		require.ErrorAs(t, h.waitClose(t), &ce)
		require.Equal(t, StatusCode(4000), ce.Code)
		require.ErrorAs(t, srv.waitClose(t), &ce)
		require.Equal(t, &CloseError{Code: 4000, Reason: "bye", ByPeer: true}, ce)
	})
}

// countingConn counts the bytes written through it.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

func TestDialCompression(t *testing.T) {
	t.Parallel()
	type side struct {
		writeBits, readBits   int
		writeNoCtx, readNoCtx bool
	}
	cases := []struct {
		name           string
		server, client CompressionOptions
		compressed     bool
		want           side // the client's deflate state
		extensions     string
	}{
		{
			name:       "context takeover",
			server:     CompressionOptions{Enabled: true},
			client:     CompressionOptions{Enabled: true},
			compressed: true,
			want:       side{15, 15, false, false},
			extensions: "permessage-deflate",
		},
		{
			name:       "server asks client_no_context_takeover",
			server:     CompressionOptions{Enabled: true, PeerNoContextTakeover: true},
			client:     CompressionOptions{Enabled: true},
			compressed: true,
			want:       side{15, 15, true, false},
			extensions: "permessage-deflate; client_no_context_takeover",
		},
		{
			name:       "client asks server_no_context_takeover",
			server:     CompressionOptions{Enabled: true},
			client:     CompressionOptions{Enabled: true, PeerNoContextTakeover: true},
			compressed: true,
			want:       side{15, 15, false, true},
			extensions: "permessage-deflate; server_no_context_takeover",
		},
		{
			name:       "client drops its own context",
			server:     CompressionOptions{Enabled: true},
			client:     CompressionOptions{Enabled: true, NoContextTakeover: true},
			compressed: true,
			want:       side{15, 15, true, false},
			extensions: "permessage-deflate; client_no_context_takeover",
		},
		{
			name:       "no context takeover both ways",
			server:     CompressionOptions{Enabled: true, NoContextTakeover: true, PeerNoContextTakeover: true},
			client:     CompressionOptions{Enabled: true},
			compressed: true,
			want:       side{15, 15, true, true},
			extensions: "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
		},
		{
			name:       "window bits",
			server:     CompressionOptions{Enabled: true, PeerWindowBits: 10},
			client:     CompressionOptions{Enabled: true, PeerWindowBits: 11},
			compressed: true,
			want:       side{10, 11, false, false},
			extensions: "permessage-deflate; server_max_window_bits=11; client_max_window_bits=10",
		},
		{
			name:       "client window below the server's ask",
			server:     CompressionOptions{Enabled: true, PeerWindowBits: 12},
			client:     CompressionOptions{Enabled: true, WindowBits: 9},
			compressed: true,
			want:       side{9, 15, false, false},
			extensions: "permessage-deflate; client_max_window_bits=9",
		},
		{name: "server without compression", client: CompressionOptions{Enabled: true}},
		{name: "client without compression", server: CompressionOptions{Enabled: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, m serverMode) {
				spy := newEcho()
				addr := m.start(t, spy, &Options{Compression: tc.server})
				var cc *countingConn
				opts := &DialOptions{Options: Options{Compression: tc.client}}
				opts.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					cc = &countingConn{Conn: nc}
					return cc, nil
				}
				c, resp, h := dialTest(t, "ws://"+addr, opts)
				sc := spy.waitOpen(t)
				require.Equal(t, tc.compressed, c.Compressed())
				require.Equal(t, tc.compressed, sc.Compressed())
				require.Equal(t, tc.extensions, resp.Header.Get("Sec-WebSocket-Extensions"))
				if tc.compressed {
					w, r := c.deflate.Directions()
					require.Equal(t, tc.want, side{w.WindowBits, r.WindowBits, w.NoContextTakeover, r.NoContextTakeover})
				}

				// Compressible messages over several rounds (context
				// takeover carries state from one to the next), a small
				// one under the threshold and incompressible bytes.
				start := cc.written.Load()
				var sent int
				for i := 0; i < 20; i++ {
					msg := []byte(strings.Repeat(`{"user":"ada","seq":`+string(rune('0'+i%10))+`,"text":"the quick brown fox"}`, 40))
					require.NoError(t, c.WriteMessage(OpText, msg))
					h.expectMessage(t, OpText, msg)
					sent += len(msg)
				}
				small := []byte("tiny")
				require.NoError(t, c.WriteMessage(OpText, small))
				h.expectMessage(t, OpText, small)
				noise := randomBytes(64 << 10)
				require.NoError(t, c.WriteMessage(OpBinary, noise))
				h.expectMessage(t, OpBinary, noise)
				compressedBytes := cc.written.Load() - start - int64(len(noise)) - int64(len(small))
				if tc.compressed {
					require.Less(t, compressedBytes, int64(sent/5), "client messages were not compressed")
				} else {
					require.Greater(t, compressedBytes, int64(sent))
				}
			})
		})
	}
}

func TestDialSubprotocol(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		addr := m.serve(t, newEcho(), nil, func(u *Upgrader) { u.Subprotocols = []string{"chat.v2", "chat.v1"} })
		c, resp, _ := dialTest(t, "ws://"+addr, &DialOptions{Subprotocols: []string{"chat.v1", "chat.v2"}})
		require.Equal(t, "chat.v2", c.Subprotocol())
		require.Equal(t, "chat.v1, chat.v2", resp.Request.Header.Get("Sec-WebSocket-Protocol"))

		c, _, _ = dialTest(t, "ws://"+addr, &DialOptions{Subprotocols: []string{"other"}})
		require.Empty(t, c.Subprotocol())
	})
}

func TestDialRefused(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		addr := m.serve(t, newEcho(), nil, func(u *Upgrader) { u.CheckOrigin = func(*http.Request) bool { return false } })
		opts := &DialOptions{Header: http.Header{"Origin": {"https://elsewhere.example"}}}
		c, resp, err := Dial(testContext(t), "ws://"+addr, nil, opts)
		require.Nil(t, c)
		var de *HandshakeError
		require.ErrorAs(t, err, &de)
		require.Equal(t, http.StatusForbidden, de.Status)
		require.Contains(t, string(de.Body), "origin not allowed")
		require.Contains(t, err.Error(), "403 Forbidden")
		require.Contains(t, err.Error(), "origin not allowed")
		require.NotNil(t, resp)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, de.Body, body)
	})

	t.Run("body cut at 1 KiB", func(t *testing.T) {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Reason", "maintenance")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write(bytes.Repeat([]byte("z"), 5000))
		}))
		defer ts.Close()
		_, resp, err := Dial(testContext(t), "ws"+strings.TrimPrefix(ts.URL, "http"), nil, nil)
		var de *HandshakeError
		require.ErrorAs(t, err, &de)
		require.Equal(t, http.StatusServiceUnavailable, de.Status)
		require.Equal(t, "maintenance", de.Header.Get("X-Reason"))
		require.Len(t, de.Body, 1024)
		require.Equal(t, "maintenance", resp.Header.Get("X-Reason"))
	})
}

func TestDialDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusFound)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	ts := httptest.NewServer(mux)
	defer ts.Close()

	c, resp, err := Dial(testContext(t), "ws"+strings.TrimPrefix(ts.URL, "http")+"/old", nil, nil)
	require.Nil(t, c)
	var de *HandshakeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, http.StatusFound, de.Status)
	require.Equal(t, "/new", de.Header.Get("Location"))
	require.Contains(t, err.Error(), `redirect to "/new" not followed`)
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Zero(t, hits.Load())
}

// rawServer accepts connections on loopback and hands each to serve in
// its own goroutine; it stops, closing what is open, when the test ends.
func rawServer(t *testing.T, serve func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(nc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// answer reads a handshake request and writes the response respond makes;
// the request goes to reqs when it is not nil.
func answer(respond func(key string) string, reqs chan<- *http.Request) func(net.Conn) {
	return func(nc net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(nc))
		if err != nil {
			return
		}
		if reqs != nil {
			reqs <- req
		}
		io.WriteString(nc, respond(req.Header.Get("Sec-WebSocket-Key")))
		io.Copy(io.Discard, nc) // hold the connection until the client closes it
	}
}

func switching(key string, extra ...string) string {
	s := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + handshake.AcceptKey(key) + "\r\n"
	for _, h := range extra {
		s += h + "\r\n"
	}
	return s + "\r\n"
}

func TestDialChecksTheResponse(t *testing.T) {
	t.Parallel()
	deflate := CompressionOptions{Enabled: true}
	cases := []struct {
		name     string
		opts     DialOptions
		response func(key string) string
		want     string
	}{
		{"wrong accept", DialOptions{}, func(string) string {
			return switching("dGhlIHNhbXBsZSBub25jZQ==")
		}, "Sec-WebSocket-Accept"},
		{"no accept", DialOptions{}, func(string) string {
			return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
		}, "Sec-WebSocket-Accept"},
		{"no upgrade", DialOptions{}, func(key string) string {
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + handshake.AcceptKey(key) + "\r\n\r\n"
		}, "Upgrade header"},
		{"no connection upgrade", DialOptions{}, func(key string) string {
			return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: keep-alive\r\nSec-WebSocket-Accept: " + handshake.AcceptKey(key) + "\r\n\r\n"
		}, "Connection header"},
		{"subprotocol not offered", DialOptions{Subprotocols: []string{"a"}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Protocol: b")
		}, `subprotocol "b", which was not offered`},
		{"subprotocol when none offered", DialOptions{}, func(key string) string {
			return switching(key, "Sec-WebSocket-Protocol: a")
		}, "not offered"},
		{"two subprotocols", DialOptions{Subprotocols: []string{"a", "b"}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Protocol: a, b")
		}, "several subprotocols"},
		{"deflate not offered", DialOptions{}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate")
		}, `extension "permessage-deflate", which was not offered`},
		{"unknown extension", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: x-webkit-deflate-frame")
		}, "not offered"},
		{"two extensions", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate, permessage-deflate")
		}, "more extensions"},
		{"malformed extensions", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; =")
		}, "malformed"},
		{"unknown parameter", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; mem_level=4")
		}, `unknown permessage-deflate parameter "mem_level"`},
		{"repeated parameter", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; server_no_context_takeover")
		}, "repeated"},
		{"value on a flag", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover=1")
		}, "takes no value"},
		{"server window 16", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=16")
		}, "not a window size"},
		{"server window with a leading zero", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=09")
		}, "not a window size"},
		{"server window over the offer", DialOptions{Options: Options{Compression: CompressionOptions{Enabled: true, PeerWindowBits: 10}}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=12")
		}, "server_max_window_bits=12 is over the 10 offered"},
		{"server window offered but not answered", DialOptions{Options: Options{Compression: CompressionOptions{Enabled: true, PeerWindowBits: 10}}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate")
		}, "without the server_max_window_bits"},
		{"server_no_context_takeover offered but not answered", DialOptions{Options: Options{Compression: CompressionOptions{Enabled: true, PeerNoContextTakeover: true}}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate")
		}, "without the server_no_context_takeover"},
		{"client window without a value", DialOptions{Options: Options{Compression: deflate}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
		}, "not a window size"},
		{"client window over the offer", DialOptions{Options: Options{Compression: CompressionOptions{Enabled: true, WindowBits: 10}}}, func(key string) string {
			return switching(key, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=12")
		}, "client_max_window_bits=12 is over the 10 offered"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawServer(t, answer(tc.response, nil))
			c, resp, err := Dial(testContext(t), "ws://"+addr, nil, &tc.opts)
			require.Nil(t, c)
			var he *HandshakeError
			require.ErrorAs(t, err, &he)
			require.Equal(t, http.StatusSwitchingProtocols, he.Status)
			require.Error(t, he.Err)
			require.Contains(t, err.Error(), tc.want)
			require.NotNil(t, resp)
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		})
	}
}

func TestDialAcceptsWhatRFC7692Allows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		offer    CompressionOptions
		response string
		want     deflate.Params
	}{
		{"plain", CompressionOptions{Enabled: true}, "permessage-deflate",
			deflate.Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}},
		{"server bounds both windows and drops our context", CompressionOptions{Enabled: true},
			"PerMessage-Deflate; Server_Max_Window_Bits=9; client_max_window_bits=\"8\"; client_no_context_takeover",
			deflate.Params{ServerMaxWindowBits: 9, ClientMaxWindowBits: 8, ClientNoContextTakeover: true}},
		{"server answers server_max_window_bits=15 unasked", CompressionOptions{Enabled: true}, "permessage-deflate; server_max_window_bits=15",
			deflate.Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}},
		{"server drops its context unasked", CompressionOptions{Enabled: true}, "permessage-deflate; server_no_context_takeover",
			deflate.Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15, ServerNoContextTakeover: true}},
		{"everything offered, everything answered",
			CompressionOptions{Enabled: true, PeerNoContextTakeover: true, NoContextTakeover: true, PeerWindowBits: 10, WindowBits: 11},
			"permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_max_window_bits=11",
			deflate.Params{ServerMaxWindowBits: 10, ClientMaxWindowBits: 11, ServerNoContextTakeover: true, ClientNoContextTakeover: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make(chan *http.Request, 1)
			addr := rawServer(t, answer(func(key string) string {
				return switching(key, "Sec-WebSocket-Extensions: "+tc.response)
			}, reqs))
			c, _, err := Dial(testContext(t), "ws://"+addr, nil, &DialOptions{Options: Options{Compression: tc.offer}})
			require.NoError(t, err)
			defer c.NetConn().Close()
			o := tc.offer.rfc(false)
			require.Equal(t, deflate.Offer(&o), (<-reqs).Header.Get("Sec-WebSocket-Extensions"))
			require.True(t, c.Compressed())
			w, r := c.deflate.Directions()
			p := tc.want
			require.Equal(t, []any{p.ClientMaxWindowBits, p.ServerMaxWindowBits, p.ClientNoContextTakeover, p.ServerNoContextTakeover},
				[]any{w.WindowBits, r.WindowBits, w.NoContextTakeover, r.NoContextTakeover})
		})
	}
}

// TestDialRequestAndEarlyBytes checks the request a raw server receives,
// that bytes the server sends right after its 101 (in the same segment)
// reach the client, and that the client masks what it writes.
func TestDialRequestAndEarlyBytes(t *testing.T) {
	t.Parallel()
	reqs := make(chan *http.Request, 1)
	frames := make(chan []byte, 1)
	errs := make(chan error, 1)
	addr := rawServer(t, func(nc net.Conn) {
		br := bufio.NewReader(nc)
		req, err := http.ReadRequest(br)
		if err != nil {
			errs <- err
			return
		}
		reqs <- req
		resp := switching(req.Header.Get("Sec-WebSocket-Key"), "Sec-WebSocket-Protocol: v1")
		out := append([]byte(resp), encodeFrame(0x81, []byte("early"), false)...)
		out = append(out, encodeFrame(0x89, []byte("ping?"), false)...)
		if _, err := nc.Write(out); err != nil {
			errs <- err
			return
		}
		// The pong, then one message: both must be masked.
		for i := 0; i < 2; i++ {
			f, err := readWireFrame(br)
			if err != nil {
				errs <- err
				return
			}
			if !f.masked {
				errs <- errors.New("client frame not masked")
				return
			}
			frames <- append([]byte{f.b0}, f.payload...)
		}
		io.Copy(io.Discard, br)
	})

	h := newRecorder()
	opts := &DialOptions{
		// The raw server never answers the close: the cleanup's close
		// handshake ends at CloseTimeout.
		Options:      Options{Compression: CompressionOptions{Enabled: true}, CloseTimeout: 100 * time.Millisecond},
		Subprotocols: []string{"v1", "v2"},
		Header:       http.Header{"Origin": {"https://app.example"}, "X-Trace": {"a", "b"}, "Host": {"virtual.example"}},
	}
	c, resp, err := Dial(testContext(t), "ws://alice:pw@"+addr+"/path?q=1", h, opts)
	require.NoError(t, err)
	runClient(t, c)
	require.Equal(t, "v1", c.Subprotocol())
	require.False(t, c.Compressed())

	req := <-reqs
	require.Equal(t, "/path?q=1", req.RequestURI)
	require.Equal(t, "virtual.example", req.Host)
	require.Equal(t, "websocket", req.Header.Get("Upgrade"))
	require.Equal(t, "Upgrade", req.Header.Get("Connection"))
	require.Equal(t, "13", req.Header.Get("Sec-WebSocket-Version"))
	require.True(t, handshake.ValidKey(req.Header.Get("Sec-WebSocket-Key")))
	require.Equal(t, "v1, v2", req.Header.Get("Sec-WebSocket-Protocol"))
	require.Equal(t, "permessage-deflate; client_max_window_bits", req.Header.Get("Sec-WebSocket-Extensions"))
	require.Equal(t, "https://app.example", req.Header.Get("Origin"))
	require.Equal(t, []string{"a", "b"}, req.Header.Values("X-Trace"))
	require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:pw")), req.Header.Get("Authorization"))
	require.Empty(t, req.Header.Get("User-Agent"))
	require.Equal(t, req.Header.Get("Sec-WebSocket-Key"), resp.Request.Header.Get("Sec-WebSocket-Key"))

	h.expectMessage(t, OpText, []byte("early"))
	var got [][]byte
	for len(got) < 1 {
		select {
		case f := <-frames:
			got = append(got, f)
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("no pong")
		}
	}
	require.Equal(t, append([]byte{0x8a}, "ping?"...), got[0])
	msg := bytes.Repeat([]byte("m"), 300)
	require.NoError(t, c.WriteMessage(OpBinary, msg))
	select {
	case f := <-frames:
		require.Equal(t, append([]byte{0x82}, msg...), f)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
}

func TestDialRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, tc := range []struct {
		url  string
		opts *DialOptions
		want string
	}{
		{"http://example.com/", nil, "scheme must be ws or wss"},
		{"ws:///path", nil, "no host"},
		{"ws://example.com/#frag", nil, "fragment"},
		{"ws://example.com/", &DialOptions{Header: http.Header{"Sec-WebSocket-Protocol": {"x"}}}, "set by the handshake itself"},
		{"ws://example.com/", &DialOptions{Header: http.Header{"Connection": {"close"}}}, "set by the handshake itself"},
		{"ws://example.com/", &DialOptions{Header: http.Header{"Bad Name": {"x"}}}, "invalid request header name"},
		{"ws://example.com/", &DialOptions{Header: http.Header{"Host": {"a\r\nb"}}}, "invalid Host"},
		{"ws://example.com/", &DialOptions{Subprotocols: []string{"a b"}}, "invalid subprotocol"},
	} {
		c, resp, err := Dial(ctx, tc.url, nil, tc.opts)
		require.Nil(t, c)
		require.Nil(t, resp)
		require.ErrorContains(t, err, tc.want, tc.url)
	}
}

func TestDialBoundedByContext(t *testing.T) {
	t.Parallel()
	accepted := make(chan net.Conn, 8)
	addr := rawServer(t, func(nc net.Conn) {
		accepted <- nc
		io.Copy(io.Discard, nc) // never answers
	})
	expectClosed := func(t *testing.T) {
		t.Helper()
		nc := <-accepted
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := nc.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "the client did not close its connection")
	}

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, resp, err := Dial(ctx, "ws://"+addr, nil, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Nil(t, resp)
		require.Less(t, time.Since(start), 3*time.Second)
		expectClosed(t)
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		_, _, err := Dial(ctx, "ws://"+addr, nil, nil)
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, time.Since(start), 3*time.Second)
		expectClosed(t)
	})
	t.Run("HandshakeTimeout", func(t *testing.T) {
		start := time.Now()
		_, _, err := Dial(context.Background(), "ws://"+addr, nil, &DialOptions{HandshakeTimeout: 200 * time.Millisecond})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 3*time.Second)
		expectClosed(t)
	})
	t.Run("context ends after Dial returned", func(t *testing.T) {
		srv := newEcho()
		addr := startServer(t, srv, nil)
		ctx, cancel := context.WithCancel(context.Background())
		h := newRecorder()
		c, _, err := Dial(ctx, "ws://"+addr, h, nil)
		require.NoError(t, err)
		runClient(t, c)
		cancel()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, c.WriteString("still here"))
		h.expectMessage(t, OpText, []byte("still here"))
	})
}

func TestDialConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, resp, err := Dial(testContext(t), "ws://"+addr, nil, nil)
	require.Nil(t, resp)
	require.ErrorContains(t, err, "connection refused")
	require.ErrorContains(t, err, "gust: dial ws://"+addr)
}

// startTLSServer serves gust over TLS on loopback with cert, and reports
// the server name each client asked for (SNI).
func startTLSServer(t *testing.T, h Event, opts *Options, cert tls.Certificate) (addr string, sni chan string) {
	t.Helper()
	sni = make(chan string, 8)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"}, // a server that would pick h2 if offered
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			sni <- hello.ServerName
			return nil, nil
		},
	}
	s := newServer(h, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	})
	return ln.Addr().String(), sni
}

// redirectDial connects every dial to addr, and records the addresses
// asked for.
func redirectDial(addr string, asked chan<- string) func(ctx context.Context, network, a string) (net.Conn, error) {
	return func(ctx context.Context, network, a string) (net.Conn, error) {
		asked <- a
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

func TestDialTLS(t *testing.T) {
	t.Parallel()
	cert, pool := testCert(t, "gust.test")
	addr, sni := startTLSServer(t, newEcho(), &Options{Compression: CompressionOptions{Enabled: true}}, cert)

	t.Run("custom roots and SNI", func(t *testing.T) {
		asked := make(chan string, 1)
		opts := &DialOptions{
			Options:        Options{Compression: CompressionOptions{Enabled: true}},
			TLSConfig:      &tls.Config{RootCAs: pool},
			NetDialContext: redirectDial(addr, asked),
		}
		c, _, h := dialTest(t, "wss://gust.test/secure", opts)
		require.Equal(t, "gust.test:443", <-asked)
		require.Equal(t, "gust.test", <-sni)
		tc, ok := c.NetConn().(*tls.Conn)
		require.True(t, ok)
		require.Equal(t, "http/1.1", tc.ConnectionState().NegotiatedProtocol)
		require.True(t, c.Compressed())
		big := bytes.Repeat([]byte("secure "), 150000)
		require.NoError(t, c.WriteMessage(OpText, big))
		h.expectMessage(t, OpText, big)
		require.NoError(t, c.WriteString("done"))
		h.expectMessage(t, OpText, []byte("done"))
	})
	t.Run("explicit ServerName wins", func(t *testing.T) {
		asked := make(chan string, 1)
		opts := &DialOptions{
			TLSConfig:      &tls.Config{RootCAs: pool, ServerName: "gust.test"},
			NetDialContext: redirectDial(addr, asked),
		}
		dialTest(t, "wss://"+addr, opts)
		require.Equal(t, addr, <-asked)
		require.Equal(t, "gust.test", <-sni)
	})
	t.Run("unknown authority", func(t *testing.T) {
		opts := &DialOptions{NetDialContext: redirectDial(addr, make(chan string, 1))}
		_, resp, err := Dial(testContext(t), "wss://gust.test/", nil, opts)
		require.Nil(t, resp)
		var ua x509.UnknownAuthorityError
		require.ErrorAs(t, err, &ua)
		<-sni
	})
	t.Run("wrong name", func(t *testing.T) {
		opts := &DialOptions{TLSConfig: &tls.Config{RootCAs: pool}, NetDialContext: redirectDial(addr, make(chan string, 1))}
		_, _, err := Dial(testContext(t), "wss://other.test/", nil, opts)
		var he x509.HostnameError
		require.ErrorAs(t, err, &he)
		<-sni
	})
}

// pipeListener hands net.Pipe ends to a Server.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new pipe whose server end is accepted.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

func serveOn(t *testing.T, ln net.Listener, h Event, opts *Options) {
	t.Helper()
	s := newServer(h, opts)
	s.Upgrader.Subprotocols = []string{"p"}
	runServer(t, s, ln)
}

// dialOver runs Dial's handshake over conn, as a user does by returning
// a connection it holds from NetDialContext.
func dialOver(ctx context.Context, conn net.Conn, rawURL string, h Event, opts *DialOptions) (*Conn, *http.Response, error) {
	var o DialOptions
	if opts != nil {
		o = *opts
	}
	o.NetDialContext = func(context.Context, string, string) (net.Conn, error) { return conn, nil }
	return Dial(ctx, rawURL, h, &o)
}

func TestDialOverAConnectionOfAnyKind(t *testing.T) {
	t.Parallel()
	opts := &Options{Compression: CompressionOptions{Enabled: true}}
	dopts := &DialOptions{Options: *opts, Subprotocols: []string{"p"}}
	exchange := func(t *testing.T, c *Conn, h *recorder) {
		require.True(t, c.Compressed())
		require.Equal(t, "p", c.Subprotocol())
		for _, msg := range [][]byte{[]byte("over a pipe"), bytes.Repeat([]byte("abc"), 100000), randomBytes(1 << 20)} {
			require.NoError(t, c.WriteMessage(OpBinary, msg))
			h.expectMessage(t, OpBinary, msg)
		}
	}

	t.Run("net.Pipe", func(t *testing.T) {
		ln := newPipeListener()
		serveOn(t, ln, newEcho(), opts)
		h := newRecorder()
		c, resp, err := dialOver(testContext(t), ln.dial(), "ws://in-memory/chat", h, dopts)
		require.NoError(t, err)
		require.Equal(t, "in-memory", resp.Request.Host)
		runClient(t, c)
		exchange(t, c, h)
	})
	t.Run("unix socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gust.sock")
		ln, err := net.Listen("unix", path)
		require.NoError(t, err)
		serveOn(t, ln, newEcho(), opts)
		nc, err := net.Dial("unix", path)
		require.NoError(t, err)
		h := newRecorder()
		c, _, err := dialOver(testContext(t), nc, "ws://localhost/", h, dopts)
		require.NoError(t, err)
		runClient(t, c)
		exchange(t, c, h)
	})
	t.Run("refused, and the conn is closed", func(t *testing.T) {
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			br := bufio.NewReader(server)
			http.ReadRequest(br)
			io.WriteString(server, "HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope")
		}()
		_, resp, err := dialOver(testContext(t), client, "ws://x/", nil, nil)
		var de *HandshakeError
		require.ErrorAs(t, err, &de)
		require.Equal(t, []byte("nope"), de.Body)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		_, err = client.Write([]byte("x"))
		require.ErrorIs(t, err, io.ErrClosedPipe)
	})
	t.Run("a pipe that never answers", func(t *testing.T) {
		client, server := net.Pipe()
		defer server.Close()
		go io.Copy(io.Discard, server)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, _, err := dialOver(ctx, client, "ws://x/", nil, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("bad URL", func(t *testing.T) {
		client, server := net.Pipe()
		defer server.Close()
		defer client.Close()
		_, _, err := dialOver(testContext(t), client, "tcp://x/", nil, nil)
		require.ErrorContains(t, err, "scheme")
	})
}

func TestDialResponseHeadLimit(t *testing.T) {
	t.Parallel()
	addr := rawServer(t, answer(func(key string) string {
		return switching(key, "X-Big: "+strings.Repeat("b", 8000))
	}, nil))
	_, _, err := Dial(testContext(t), "ws://"+addr, nil, &DialOptions{MaxHeaderBytes: 4096})
	require.ErrorContains(t, err, "response head over 4096 bytes")

	c, _, err := Dial(testContext(t), "ws://"+addr, nil, nil)
	require.NoError(t, err)
	c.NetConn().Close()
}

func TestClientWriteDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; see BenchmarkDialWriteMessage1KiB")
	}
	addr := startServer(t, discardHandler{}, nil)
	c, _, _ := dialTest(t, "ws://"+addr, nil)
	p := randomBytes(1024)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := c.WriteMessage(OpBinary, p); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// BenchmarkDialWriteMessage1KiB writes masked 1 KiB messages from a dialed
// client over loopback TCP to a gust server that discards them.
func BenchmarkDialWriteMessage1KiB(b *testing.B) {
	s := newServer(discardHandler{}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	c, _, err := Dial(context.Background(), "ws://"+ln.Addr().String(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		c.ReadLoop()
		close(done)
	}()
	p := randomBytes(1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if err := c.WriteMessage(OpBinary, p); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close(StatusNormalClosure, "")
	<-done
}
