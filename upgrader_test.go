package gust

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHandshakeRefusals(t *testing.T) {
	t.Parallel()
	valid := func(addr string) string { return handshakeRequest(addr) }
	tests := []struct {
		name   string
		req    func(addr string) string
		status int
		header [2]string
	}{
		{"POST", func(a string) string { return strings.Replace(valid(a), "GET", "POST", 1) }, 405, [2]string{"Allow", "GET"}},
		{"no Upgrade", func(a string) string { return strings.Replace(valid(a), "Upgrade: websocket\r\n", "", 1) }, 400, [2]string{}},
		{"Upgrade h2c", func(a string) string { return strings.Replace(valid(a), "Upgrade: websocket", "Upgrade: h2c", 1) }, 400, [2]string{}},
		{"no Connection upgrade", func(a string) string {
			return strings.Replace(valid(a), "Connection: Upgrade", "Connection: keep-alive", 1)
		}, 400, [2]string{}},
		{"version 8", func(a string) string {
			return strings.Replace(valid(a), "Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8", 1)
		}, 426, [2]string{"Sec-WebSocket-Version", "13"}},
		{"bad key", func(a string) string {
			i := strings.Index(valid(a), "Sec-WebSocket-Key: ")
			s := valid(a)
			return s[:i] + "Sec-WebSocket-Key: c2hvcnQ=\r\n\r\n"
		}, 400, [2]string{}},
		{"foreign origin", func(a string) string {
			return strings.Replace(valid(a), "\r\n\r\n", "\r\nOrigin: http://evil.example\r\n\r\n", 1)
		}, 403, [2]string{}},
		{"no Host", func(a string) string { return strings.Replace(valid(a), "Host: "+a+"\r\n", "", 1) }, 400, [2]string{}},
		{"two Hosts", func(a string) string {
			return strings.Replace(valid(a), "\r\n\r\n", "\r\nHost: "+a+"\r\n\r\n", 1)
		}, 400, [2]string{}},
		{"Content-Length body", func(a string) string {
			return strings.Replace(valid(a), "\r\n\r\n", "\r\nContent-Length: 5\r\n\r\nhello", 1)
		}, 400, [2]string{}},
		{"chunked body", func(a string) string {
			return strings.Replace(valid(a), "\r\n\r\n", "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 1)
		}, 400, [2]string{}},
		{"bad Content-Length", func(a string) string {
			return strings.Replace(valid(a), "\r\n\r\n", "\r\nContent-Length: +0\r\n\r\n", 1)
		}, 400, [2]string{}},
		{"HTTP/1.0", func(a string) string { return strings.Replace(valid(a), "HTTP/1.1", "HTTP/1.0", 1) }, 400, [2]string{}},
		{"unparsable Origin", func(a string) string { return handshakeRequest(a, "Origin: http://[::1") }, 403, [2]string{}},
	}
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, nil)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				nc, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(5 * time.Second))
				c := &rawClient{t: t, nc: nc}
				c.br = newBufReader(nc)
				resp := c.rawRequest(tt.req(addr))
				require.Equal(t, tt.status, resp.StatusCode)
				if tt.header[0] != "" {
					require.Equal(t, tt.header[1], resp.Header.Get(tt.header[0]))
				}
				body, _ := io.ReadAll(resp.Body)
				require.NotEmpty(t, body)
			})
		}
		require.Zero(t, h.opens.Load())
	})
}

func TestSameOriginAndSubprotocol(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.serve(t, h, nil, func(u *Upgrader) {
			u.Subprotocols = []string{"v2.chat", "v1.chat"}
			u.ResponseHeader = http.Header{"X-Gust": {"yes"}}
		})
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer nc.Close()
		c := &rawClient{t: t, nc: nc, br: newBufReader(nc)}
		resp := c.rawRequest(handshakeRequest(addr, "Origin: http://"+addr, "Sec-WebSocket-Protocol: v1.chat, v2.chat"))
		require.Equal(t, 101, resp.StatusCode)
		require.Equal(t, "v2.chat", resp.Header.Get("Sec-WebSocket-Protocol"))
		require.Equal(t, "yes", resp.Header.Get("X-Gust"))
	})
}

func TestUpgradeWithoutHijacker(t *testing.T) {
	t.Parallel()
	u := newUpgrader(newRecorder(), nil)
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
	t.Parallel()
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
			nc := dialNet(t, addr)
			defer nc.Close()
			c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
			resp := c.rawRequest(handshakeRequest(addr))
			require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
			require.ErrorIs(t, <-upgradeErr, http.ErrNotSupported)
		})
	}
}

func TestNoCommonSubprotocol(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		proto := make(chan string, 1)
		h.open = func(c *Conn) { proto <- c.Subprotocol() }
		addr := m.serve(t, h, nil, func(u *Upgrader) { u.Subprotocols = []string{"v2"} })
		nc := dialNet(t, addr)
		defer nc.Close()
		c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
		resp := c.rawRequest(handshakeRequest(addr, "Sec-WebSocket-Protocol: v1"))
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		require.Empty(t, resp.Header.Values("Sec-WebSocket-Protocol"))
		require.Equal(t, "", <-proto)
	})
}
