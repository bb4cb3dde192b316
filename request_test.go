package gust

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// The handshake as the application sees it (Upgrader.OnRequest), over every
// way to reach a gust server: an Upgrader over HTTP/1.1 and HTTP/2, and a
// Server.

// modeURL returns the URL that reaches the server m serves at addr, with
// path (and query) after the host, and the DialOptions that reach it.
func modeURL(t *testing.T, m serverMode, addr, path string) (string, *DialOptions) {
	t.Helper()
	if m.name == h2Mode.name {
		url, opts := dialH2Options(t, addr)
		opts.Options = Options{}
		return strings.TrimSuffix(url, "/ws") + path, opts
	}
	if host, ok := strings.CutPrefix(addr, "tls://"); ok {
		return "wss://" + host + path, &DialOptions{TLSConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	return "ws://" + addr + path, &DialOptions{}
}

// dialMode dials url with opts, requires success (101, or 200 over
// HTTP/2) and runs the client.
func dialMode(t *testing.T, url string, opts *DialOptions) (*Conn, *http.Response, *recorder) {
	t.Helper()
	h := newRecorder()
	c, resp, err := Dial(testContext(t), url, h, opts)
	require.NoError(t, err)
	runClient(t, c)
	return c, resp, h
}

// seenRequest is what OnRequest saw of a request.
type seenRequest struct {
	method, path, query, header, cookie, host, remote string
	tls                                               *tls.ConnectionState
	localAddr                                         bool
}

func seeRequest(r *http.Request) seenRequest {
	s := seenRequest{
		method: r.Method, path: r.URL.Path, query: r.URL.Query().Get("room"),
		header: r.Header.Get("X-Test"), host: r.Host, remote: r.RemoteAddr, tls: r.TLS,
	}
	if ck, err := r.Cookie("session"); err == nil {
		s.cookie = ck.Value
	}
	_, s.localAddr = r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return s
}

func TestOnRequestSeesTheRequestAndAttachesData(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		seen := make(chan seenRequest, 1)
		h := newRecorder()
		openedWith := make(chan any, 1)
		h.open = func(c *Conn) {
			v, _ := c.Get("user")
			openedWith <- v
		}
		h.message = func(c *Conn, msg *Message) {
			v, _ := c.Get("user")
			c.WriteString(fmt.Sprint(v))
			msg.Close()
		}
		addr := m.serve(t, h, nil, func(u *Upgrader) {
			u.OnRequest = func(r *http.Request, _ http.Header, c *Conn) error {
				seen <- seeRequest(r)
				c.Set("user", "ada")
				return nil
			}
		})
		url, opts := modeURL(t, m, addr, "/chat/lobby?room=7&x=y")
		opts.Header = http.Header{"X-Test": {"yes"}, "Cookie": {"theme=dark; session=s3cret"}}
		client, _, ch := dialMode(t, url, opts)

		s := <-seen
		require.Equal(t, "/chat/lobby", s.path)
		require.Equal(t, "7", s.query)
		require.Equal(t, "yes", s.header)
		require.Equal(t, "s3cret", s.cookie)
		require.True(t, s.localAddr, "the request's context carries the local address")
		host, _, err := net.SplitHostPort(s.remote)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1", host)
		if m.name == h2Mode.name {
			require.Equal(t, http.MethodConnect, s.method)
			require.NotNil(t, s.tls)
		} else {
			host, isTLS := strings.CutPrefix(addr, "tls://")
			require.Equal(t, http.MethodGet, s.method)
			require.Equal(t, host, s.host)
			require.Equal(t, client.LocalAddr().String(), s.remote)
			require.Equal(t, isTLS, s.tls != nil)
		}

		require.Equal(t, "ada", <-openedWith)
		require.NoError(t, client.WriteString("who am I?"))
		require.Equal(t, "ada", string(ch.waitMessage(t).data))
	})
}

func TestOnRequestSeesTLS(t *testing.T) {
	t.Parallel()
	cert, pool := testCert(t, "gust.test")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{cert}}
	seen := make(chan seenRequest, 1)
	onRequest := func(r *http.Request, _ http.Header, _ *Conn) error {
		seen <- seeRequest(r)
		return nil
	}
	check := func(t *testing.T, addr string) {
		opts := &DialOptions{TLSConfig: &tls.Config{RootCAs: pool, ServerName: "gust.test"}}
		dialTest(t, "wss://"+addr+"/secure", opts)
		s := <-seen
		require.Equal(t, "/secure", s.path)
		require.NotNil(t, s.tls)
		require.True(t, s.tls.HandshakeComplete)
		require.Equal(t, "gust.test", s.tls.ServerName)
		require.Equal(t, uint16(tls.VersionTLS13), s.tls.Version)
	}
	t.Run("server", func(t *testing.T) {
		s := newServer(newEcho(), nil)
		s.Upgrader.OnRequest = onRequest
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		runServer(t, s, tls.NewListener(ln, serverTLS))
		check(t, ln.Addr().String())
	})
	t.Run("upgrader", func(t *testing.T) {
		u := newUpgrader(newEcho(), nil)
		u.OnRequest = onRequest
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := u.Upgrade(w, r); err == nil {
				c.ReadLoop()
			}
		}))
		ts.TLS = serverTLS
		ts.StartTLS()
		t.Cleanup(ts.Close)
		check(t, ts.Listener.Addr().String())
	})
}

// refusingOnRequest refuses as the request's query says.
func refusingOnRequest(r *http.Request, _ http.Header, _ *Conn) error {
	switch r.URL.Query().Get("refuse") {
	case "custom":
		return &HandshakeError{
			Status: http.StatusUnauthorized,
			Header: http.Header{"Www-Authenticate": {`Bearer realm="chat"`}, "Content-Type": {"application/json"}},
			Body:   []byte(`{"error":"no token"}`),
		}
	case "wrapped":
		return fmt.Errorf("rate limit: %w", &HandshakeError{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3"}}})
	case "zero":
		return &HandshakeError{Body: []byte("go away")}
	case "plain":
		return errors.New("db password is hunter2")
	case "redirect":
		return &HandshakeError{Status: http.StatusTemporaryRedirect, Header: http.Header{"Location": {"/elsewhere"}}}
	}
	return nil
}

func TestOnRequestRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		refuse      string
		status      int
		header      [2]string
		body        string
		contentType string
	}{
		{"custom", 401, [2]string{"Www-Authenticate", `Bearer realm="chat"`}, `{"error":"no token"}`, "application/json"},
		{"wrapped", 429, [2]string{"Retry-After", "3"}, "", ""},
		{"zero", 403, [2]string{}, "go away", "text/plain; charset=utf-8"},
		{"plain", 403, [2]string{}, "", ""},
		{"redirect", 307, [2]string{"Location", "/elsewhere"}, "", ""},
	}
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.serve(t, h, nil, func(u *Upgrader) { u.OnRequest = refusingOnRequest })
		for _, tt := range tests {
			t.Run(tt.refuse, func(t *testing.T) {
				url, opts := modeURL(t, m, addr, "/?refuse="+tt.refuse)
				c, resp, err := Dial(testContext(t), url, newRecorder(), opts)
				require.Nil(t, c)
				var he *HandshakeError
				require.ErrorAs(t, err, &he)
				require.Equal(t, tt.status, he.Status)
				require.Equal(t, tt.status, resp.StatusCode)
				require.Equal(t, tt.body, string(he.Body))
				if tt.header[0] != "" {
					require.Equal(t, tt.header[1], he.Header.Get(tt.header[0]))
				}
				if tt.contentType != "" {
					require.Equal(t, tt.contentType, he.Header.Get("Content-Type"))
				}
				require.NotContains(t, fmt.Sprint(he.Header), "hunter2")
				if m.path == "server" {
					require.True(t, resp.Close, "the Server ends the connection")
				}
			})
		}
		// the handshake still works, and no refused request reached OnOpen
		url, opts := modeURL(t, m, addr, "/")
		dialMode(t, url, opts)
		h.waitOpen(t)
		require.Equal(t, int32(1), h.opens.Load())
	})
}

// TestOnRequestUpgradeReturnsTheRefusal checks what Upgrade returns to its
// caller when OnRequest refuses.
func TestOnRequestUpgradeReturnsTheRefusal(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 1)
	u := newUpgrader(newEcho(), nil)
	plain := errors.New("db password is hunter2")
	u.OnRequest = func(r *http.Request, h http.Header, c *Conn) error {
		if r.URL.Query().Get("refuse") == "plain" {
			return plain
		}
		return refusingOnRequest(r, h, c)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		errs <- err
		if err == nil {
			c.ReadLoop()
		}
	}))
	t.Cleanup(ts.Close)
	url := "ws" + strings.TrimPrefix(ts.URL, "http")

	_, _, err := Dial(testContext(t), url+"/?refuse=plain", nil, nil)
	require.Error(t, err)
	err = <-errs
	var he *HandshakeError
	require.ErrorAs(t, err, &he)
	require.Equal(t, http.StatusForbidden, he.Status)
	require.ErrorIs(t, err, plain)
	require.Equal(t, "gust: handshake refused with 403 Forbidden: db password is hunter2", err.Error())

	_, _, err = Dial(testContext(t), url+"/?refuse=wrapped", nil, nil)
	require.Error(t, err)
	err = <-errs
	require.ErrorAs(t, err, &he)
	require.Equal(t, http.StatusTooManyRequests, he.Status)
	require.ErrorContains(t, err, "rate limit")

	_, _, err = Dial(testContext(t), url+"/?refuse=zero", nil, nil)
	require.Error(t, err)
	require.ErrorAs(t, <-errs, &he)
	require.Equal(t, http.StatusForbidden, he.Status, "a refusal with status 0 is sent as 403")
	require.Equal(t, "go away", string(he.Body))
}

func TestOnRequestChoosesSubprotocol(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		opened := make(chan string, 4)
		h.open = func(c *Conn) { opened <- c.Subprotocol() }
		logged := &testkit.Buffer{}
		addr := m.serve(t, h, &Options{Logger: slog.New(slog.NewTextHandler(logged, nil))}, func(u *Upgrader) {
			u.Subprotocols = []string{"v1.chat"}
			u.OnRequest = func(r *http.Request, h http.Header, _ *Conn) error {
				if p := r.URL.Query().Get("proto"); p != "" {
					h.Set("Sec-WebSocket-Protocol", p)
				}
				return nil
			}
		})
		dial := func(query string) (*Conn, error) {
			url, opts := modeURL(t, m, addr, "/"+query)
			opts.Subprotocols = []string{"v1.chat", "v2.chat"}
			c, _, err := Dial(testContext(t), url, newRecorder(), opts)
			if err == nil {
				runClient(t, c)
			}
			return c, err
		}

		c, err := dial("?proto=v2.chat")
		require.NoError(t, err)
		require.Equal(t, "v2.chat", c.Subprotocol())
		require.Equal(t, "v2.chat", <-opened)

		c, err = dial("") // Subprotocols decides
		require.NoError(t, err)
		require.Equal(t, "v1.chat", c.Subprotocol())
		require.Equal(t, "v1.chat", <-opened)

		_, err = dial("?proto=v3.chat") // not offered: the server's mistake
		var he *HandshakeError
		require.ErrorAs(t, err, &he)
		require.Equal(t, http.StatusInternalServerError, he.Status)
		require.Empty(t, he.Body)
		require.Eventually(t, func() bool { return strings.Contains(logged.String(), "v3.chat") }, 5*time.Second, 10*time.Millisecond)
	})
}

// cookieValues returns the cookies a response sets, by name.
func cookieValues(resp *http.Response) map[string]string {
	m := make(map[string]string)
	for _, c := range resp.Cookies() {
		m[c.Name] = c.Value
	}
	return m
}

func TestOnRequestResponseHeader(t *testing.T) {
	t.Parallel()
	onRequest := func(r *http.Request, h http.Header, _ *Conn) error {
		h.Add("Set-Cookie", (&http.Cookie{Name: "session", Value: "fresh", HttpOnly: true}).String())
		h.Set("X-Request-Id", "r-42")
		h.Set("Upgrade", "h2c") // the handshake's own fields are not the application's
		return nil
	}
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		addr := m.serve(t, newEcho(), nil, func(u *Upgrader) {
			u.ResponseHeader = http.Header{"X-Server": {"gust"}}
			u.OnRequest = onRequest
		})
		url, opts := modeURL(t, m, addr, "/")
		_, resp, _ := dialMode(t, url, opts)
		require.Equal(t, "fresh", cookieValues(resp)["session"])
		require.Equal(t, "r-42", resp.Header.Get("X-Request-Id"))
		require.Equal(t, "gust", resp.Header.Get("X-Server"))
		if m.name != h2Mode.name {
			require.Equal(t, []string{"websocket"}, resp.Header.Values("Upgrade"))
		}
	})
}

// TestUpgradeKeepsResponseWriterHeader: fields set on w before Upgrade (a
// cookie set by the handler or a middleware) reach the handshake response,
// over HTTP/1.1 as over HTTP/2, beside ResponseHeader's and OnRequest's.
func TestUpgradeKeepsResponseWriterHeader(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			u := newUpgrader(newEcho(), nil)
			u.ResponseHeader = http.Header{"Set-Cookie": {"theme=dark"}}
			u.OnRequest = func(_ *http.Request, h http.Header, _ *Conn) error {
				h.Add("Set-Cookie", "session=fresh")
				return nil
			}
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.SetCookie(w, &http.Cookie{Name: "csrf", Value: "t0ken", Path: "/"})
				w.Header().Set("Vary", "Origin")
				w.Header().Set("Content-Length", "12") // no length on a 101 or a CONNECT's 200
				if c, err := u.Upgrade(w, r); err == nil {
					c.ReadLoop()
				}
			}))
			ts.EnableHTTP2 = h2
			ts.StartTLS()
			t.Cleanup(ts.Close)
			opts := &DialOptions{TLSConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig, HTTP2: h2}
			_, resp, _ := dialMode(t, "wss://"+strings.TrimPrefix(ts.URL, "https://")+"/", opts)
			if h2 {
				require.Equal(t, 2, resp.ProtoMajor)
			} else {
				require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			}
			require.Equal(t, map[string]string{"csrf": "t0ken", "theme": "dark", "session": "fresh"}, cookieValues(resp))
			require.Equal(t, "Origin", resp.Header.Get("Vary"))
			require.Empty(t, resp.Header.Values("Content-Length"))
		})
	}
}

// TestOnRequestInvalidFields: a field that would corrupt the response
// (CR or LF in a value, a name that is not a token), or a status that is no
// refusal, answers 500 and is logged; nothing the application wrote gets
// through.
func TestOnRequestInvalidFields(t *testing.T) {
	t.Parallel()
	cases := map[string]func(h http.Header) error{
		"value": func(h http.Header) error {
			h.Set("X-Note", "a\r\nX-Injected: 1")
			return nil
		},
		"name": func(h http.Header) error {
			h["X Bad"] = []string{"1"}
			return nil
		},
		"nul": func(h http.Header) error {
			h.Set("Set-Cookie", "a=\x00")
			return nil
		},
		"refusal": func(http.Header) error {
			return &HandshakeError{Status: 401, Header: http.Header{"Www-Authenticate": {"Basic\r\nX-Injected: 1"}}}
		},
		"status": func(http.Header) error {
			return &HandshakeError{Status: http.StatusOK, Body: []byte("ok?")}
		},
	}
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		logged := &testkit.Buffer{}
		addr := m.serve(t, h, &Options{Logger: slog.New(slog.NewTextHandler(logged, nil))}, func(u *Upgrader) {
			u.OnRequest = func(r *http.Request, h http.Header, _ *Conn) error {
				return cases[r.URL.Query().Get("case")](h)
			}
		})
		for name := range cases {
			t.Run(name, func(t *testing.T) {
				url, opts := modeURL(t, m, addr, "/?case="+name)
				_, resp, err := Dial(testContext(t), url, nil, opts)
				var he *HandshakeError
				require.ErrorAs(t, err, &he)
				require.Equal(t, http.StatusInternalServerError, he.Status)
				require.Empty(t, resp.Header.Values("X-Injected"))
				require.Empty(t, he.Body)
			})
		}
		require.Zero(t, h.opens.Load())
		require.Eventually(t, func() bool { return strings.Count(logged.String(), "gust: handshake from") == len(cases) },
			5*time.Second, 10*time.Millisecond, "logged: %s", logged)
	})

	t.Run("ResponseHeader", func(t *testing.T) {
		forEachFrameMode(t, func(t *testing.T, m serverMode) {
			addr := m.serve(t, newEcho(), &Options{Logger: slog.New(slog.DiscardHandler)}, func(u *Upgrader) {
				u.ResponseHeader = http.Header{"X-Bad": {"a\nb"}}
			})
			url, opts := modeURL(t, m, addr, "/")
			_, _, err := Dial(testContext(t), url, nil, opts)
			var he *HandshakeError
			require.ErrorAs(t, err, &he)
			require.Equal(t, http.StatusInternalServerError, he.Status)
		})
	})
}

// TestOnRequestConnNotOpenYet: the Conn OnRequest gets refuses every write
// and close with net.ErrClosed, without a panic and without harm: once the
// handshake is done, the same Conn works.
func TestOnRequestConnNotOpenYet(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		h.open = func(c *Conn) {
			v, _ := c.Get("pending")
			if v != c {
				panic("OnOpen got another Conn than OnRequest")
			}
			c.WriteString("opened")
		}
		errs := make(chan []error, 1)
		addr := m.serve(t, h, nil, func(u *Upgrader) {
			u.OnRequest = func(r *http.Request, _ http.Header, c *Conn) error {
				pm, _ := NewPreparedMessage(OpText, []byte("x"))
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, perr := c.Ping(ctx)
				errs <- []error{
					c.WriteString("too early"),
					c.WriteMessage(OpBinary, []byte{1}),
					c.WriteAsync(OpText, []byte("x"), func(error) { panic("done called") }),
					c.WritePrepared(pm),
					c.WritePreparedAsync(pm, nil),
					c.WriteJSON(map[string]int{"a": 1}),
					c.WritePing(nil),
					perr,
					c.Close(StatusNormalClosure, ""),
					c.CloseNow(),
					c.SetReadDeadline(time.Now()),
					c.SetWriteDeadline(time.Now()),
				}
				require.Nil(t, c.RemoteAddr())
				c.ReadLoop() // returns at once, and does not keep the Conn from starting later
				c.Set("pending", c)
				return nil
			}
		})
		url, opts := modeURL(t, m, addr, "/")
		_, _, ch := dialMode(t, url, opts)
		for i, err := range <-errs {
			require.ErrorIs(t, err, net.ErrClosed, "call %d", i)
		}
		require.Equal(t, "opened", string(ch.waitMessage(t).data))
		c := h.waitOpen(t)
		require.NotNil(t, c.RemoteAddr())
		require.NoError(t, c.Close(StatusNormalClosure, "bye"))
		require.Equal(t, StatusNormalClosure, CloseStatus(ch.waitClose(t)))
	})
}

// TestOnRequestRefusalsLeaveNothing: refused handshakes (refusals, 500s,
// panics) leave no goroutine, no descriptor and no tracked connection.
func TestOnRequestRefusalsLeaveNothing(t *testing.T) {
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		var u *Upgrader
		addr := m.serve(t, newEcho(), &Options{Logger: slog.New(slog.DiscardHandler)}, func(up *Upgrader) {
			u = up
			up.OnRequest = func(r *http.Request, h http.Header, c *Conn) error {
				c.Set("big", make([]byte, 1<<20))
				switch r.URL.Query().Get("n") {
				case "0":
					panic("boom")
				case "1":
					h.Set("X-Bad", "\r\n")
					return nil
				case "2":
					return errors.New("no")
				}
				return &HandshakeError{Status: http.StatusUnauthorized, Body: []byte("who are you?")}
			}
		})
		url, opts := modeURL(t, m, addr, "/")
		// One round first, for the pools and the HTTP/2 connection.
		for i := range 4 {
			_, _, err := Dial(testContext(t), fmt.Sprintf("%s?n=%d", url, i), nil, opts)
			require.Error(t, err)
		}
		goroutines, fds := runtime.NumGoroutine(), countFDs(t)
		for i := range 40 {
			_, _, err := Dial(testContext(t), fmt.Sprintf("%s?n=%d", url, i%4), nil, opts)
			var he *HandshakeError
			require.ErrorAs(t, err, &he)
			require.Equal(t, []int{500, 500, 403, 401}[i%4], he.Status)
		}
		require.True(t, assertEventually(5*time.Second, func() bool {
			return runtime.NumGoroutine() <= goroutines && countFDs(t) <= fds
		}), "goroutines %d → %d, descriptors %d → %d", goroutines, runtime.NumGoroutine(), fds, countFDs(t))
		require.Zero(t, u.track.Len())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.NoError(t, u.Shutdown(ctx), "no connection, no place left reserved")
	})
}

// TestOnRequestLargeRefusalBody: a refusal's body goes out whole to a
// client that reads it, and the handshake timeout bounds its write to one
// that does not.
func TestOnRequestLargeRefusalBody(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	huge := bytes.Repeat(body, 64)                          // more than the socket buffers hold (≤ 36 MiB here)
	forEachTCPModeParallel(t, func(t *testing.T, m serverMode) {
		ml := &metricsLog{}
		addr := m.serve(t, newEcho(), &Options{Metrics: ml}, func(u *Upgrader) {
			u.HandshakeTimeout = 300 * time.Millisecond
			u.OnRequest = func(r *http.Request, _ http.Header, _ *Conn) error {
				if r.URL.Query().Get("huge") != "" {
					return &HandshakeError{Status: http.StatusForbidden, Body: huge}
				}
				return &HandshakeError{Status: http.StatusForbidden, Body: body}
			}
		})
		request := func(target string) net.Conn {
			nc := dialNet(t, addr)
			t.Cleanup(func() { nc.Close() })
			_, err := io.WriteString(nc, strings.Replace(handshakeRequest(addr), "GET / ", "GET "+target+" ", 1))
			require.NoError(t, err)
			return nc
		}

		nc := request("/")
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, body, got)
		ml.waitHandshakes(t, 1)

		// 64 MiB to a client that reads nothing until the server has given
		// up (Metrics hears of the refusal once its write has ended): the
		// write is cut after the handshake timeout and the connection
		// closed. Reading earlier would let a server slowed down by the
		// other tests write it all well within the timeout.
		nc = request("/?huge=1")
		require.Equal(t, []int{403, 403}, ml.waitHandshakes(t, 2))
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, nc)
		if err == nil || isReset(err) || errors.Is(err, io.ErrUnexpectedEOF) { // TLS: a record cut short
			require.Less(t, n, int64(len(huge)), "the write was cut")
		} else {
			require.NoError(t, err)
		}
	})
}

func TestHandshakeErrorServerSideMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, "gust: handshake refused with 401 Unauthorized: no token",
		(&HandshakeError{Status: 401, Body: []byte("no token")}).Error())
	require.Equal(t, "gust: handshake refused with 403 Forbidden: expired",
		(&HandshakeError{Status: 403, Err: errors.New("expired")}).Error())
	require.Equal(t, "gust: handshake refused with 403 Forbidden", (&HandshakeError{Status: 403}).Error())
}

// TestOnRequestMetrics: Options.Metrics sees OnRequest's outcomes as any
// handshake's: its refusals with the status sent, its mistakes as 500, an
// acceptance as 101 (200 over HTTP/2).
func TestOnRequestMetrics(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		ml := &metricsLog{}
		addr := m.serve(t, newEcho(), &Options{Metrics: ml, Logger: slog.New(slog.DiscardHandler)}, func(u *Upgrader) {
			u.OnRequest = func(r *http.Request, h http.Header, c *Conn) error {
				if r.URL.Query().Get("bad") != "" {
					h.Set("X-Bad", "\n")
					return nil
				}
				return refusingOnRequest(r, h, c)
			}
		})
		for _, q := range []string{"?refuse=custom", "?refuse=plain", "?refuse=wrapped", "?bad=1"} {
			url, opts := modeURL(t, m, addr, "/"+q)
			_, _, err := Dial(testContext(t), url, nil, opts)
			require.Error(t, err)
		}
		url, opts := modeURL(t, m, addr, "/")
		dialMode(t, url, opts)
		accepted := http.StatusSwitchingProtocols
		if m.name == h2Mode.name {
			accepted = http.StatusOK
		}
		require.ElementsMatch(t, []int{401, 403, 429, 500, accepted}, ml.waitHandshakes(t, 5))
	})
}

// TestOnRequestConnWrittenMeanwhile: a goroutine that OnRequest hands the
// Conn to may write while the handshake completes: its writes fail with
// net.ErrClosed until the Conn opens, then go out after the 101 (the race
// detector checks that opening publishes the Conn's fields to it).
func TestOnRequestConnWrittenMeanwhile(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		var writers sync.WaitGroup
		t.Cleanup(writers.Wait)
		addr := m.serve(t, newRecorder(), nil, func(u *Upgrader) {
			u.OnRequest = func(_ *http.Request, _ http.Header, c *Conn) error {
				writers.Go(func() {
					deadline := time.Now().Add(10 * time.Second)
					for time.Now().Before(deadline) {
						err := c.WriteAsync(OpText, []byte("early"), nil)
						if err == nil {
							return
						}
						if !errors.Is(err, net.ErrClosed) {
							panic(err)
						}
						runtime.Gosched()
					}
				})
				time.Sleep(5 * time.Millisecond) // let the writer try before the Conn opens
				return nil
			}
		})
		url, opts := modeURL(t, m, addr, "/")
		_, _, ch := dialMode(t, url, opts)
		require.Equal(t, "early", string(ch.waitMessage(t).data))
	})
}

// A write, a Close or a Ping on the Conn OnRequest receives fails with an
// error that says the connection is not open yet (still net.ErrClosed for
// errors.Is), and a ReadLoop there logs a Warn record; the Conn then opens
// intact.
func TestMisuseInOnRequestIsNamed(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	h := newRecorder()
	errs := make(chan []error, 1)
	addr := serveUpgrader(t, h, &Options{Logger: newLogger(&logs)}, func(u *Upgrader) {
		u.OnRequest = func(r *http.Request, _ http.Header, c *Conn) error {
			_, perr := c.Ping(context.Background())
			errs <- []error{
				c.WriteString("early"),
				c.WriteMessage(OpBinary, nil),
				c.WriteAsync(OpText, []byte("early"), nil),
				c.WritePing(nil),
				perr,
				c.Close(StatusNormalClosure, ""),
				c.CloseNow(),
			}
			c.ReadLoop()
			return nil
		}
	})
	c := dialRaw(t, addr, nil)
	for i, err := range <-errs {
		require.ErrorIs(t, err, net.ErrClosed, "call %d", i)
		require.ErrorIs(t, err, errNotOpen, "call %d", i)
		require.Contains(t, err.Error(), "not open yet", "call %d", i)
	}
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "ReadLoop called before the connection is open")

	sc := h.waitOpen(t)
	require.NoError(t, sc.WriteString("open"))
	c.expectMessage(OpText, []byte("open"))
	var zero Conn
	require.NotErrorIs(t, zero.WriteString("x"), errNotOpen, "a zero Conn is closed, not pending")
	require.ErrorIs(t, zero.WriteString("x"), net.ErrClosed)
}

// A second ReadLoop on a live connection returns at once and logs a Warn
// record that says why; one after the connection ended stays quiet.
func TestReadLoopTwiceWarns(t *testing.T) {
	t.Parallel()
	for _, netpoll := range []bool{false, true} {
		var logs testkit.Buffer
		h := newRecorder()
		returned := make(chan time.Duration, 1)
		h.open = func(c *Conn) {
			start := time.Now()
			c.ReadLoop()
			returned <- time.Since(start)
		}
		addr := startUpgrader(t, h, &Options{Netpoll: netpoll, Logger: newLogger(&logs)})
		c := dialRaw(t, addr, nil)
		sc := h.waitOpen(t)
		require.Less(t, <-returned, time.Second)
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), "ReadLoop called while it runs")
		c.nc.Close()
		h.waitClose(t)
		before := logs.String()
		sc.ReadLoop()
		require.Equal(t, before, logs.String(), "quiet once the connection has ended")
	}
}
