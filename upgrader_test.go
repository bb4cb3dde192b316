package gust

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHandshakeRefusals(t *testing.T) {
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
	})
}

func TestSameOriginAndSubprotocol(t *testing.T) {
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

func TestServerRefusesMalformedAndHugeHeads(t *testing.T) {
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
