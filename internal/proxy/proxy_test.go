package proxy

import (
	"encoding/base64"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tests talk to a scripted proxy: over a loopback TCP connection it
// sends canned answers, optionally ends its side (EOF for the client), and
// records every byte the client sent. The root package's tests run real
// proxies end to end through Dial.

// scripted is a run of Tunnel against a scripted proxy.
type scripted struct {
	answers string // what the proxy sends, all of it, as soon as it can
	eof     bool   // the proxy ends its side after the answers
}

// run calls Tunnel over a connection to the scripted proxy, reads tail
// bytes from the tunnel when it opened, and returns what the client sent.
func (s scripted) run(t *testing.T, u *url.URL, target string, tail int) (sent, tailRead string, err error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			got <- ""
			return
		}
		defer nc.Close()
		go func() {
			nc.Write([]byte(s.answers))
			if s.eof {
				nc.(*net.TCPConn).CloseWrite()
			}
		}()
		b, _ := io.ReadAll(nc)
		got <- string(b)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	nc, terr := Tunnel(client, u, target)
	if terr == nil && tail > 0 {
		b := make([]byte, tail)
		_, err := io.ReadFull(nc, b)
		require.NoError(t, err)
		tailRead = string(b)
	}
	client.Close()
	return <-got, tailRead, terr
}

func TestAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://p", "p:80"}, {"socks5://p", "p:1080"}, {"SOCKS5H://p:9", "p:9"}, {"http://[::1]", "[::1]:80"},
	} {
		u, err := url.Parse(tc.in)
		require.NoError(t, err)
		got, err := Addr(u)
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	for _, tc := range []struct{ in, want string }{
		{"ftp://proxy.example", `proxy ftp://proxy.example: unsupported scheme "ftp" (http, socks5 and socks5h are)`},
		{"https://proxy.example", `unsupported scheme "https"`},
		{"http://", "no host"},
		{"http://u:secret@:8080", "proxy http://u:xxxxx@:8080: no host"},
	} {
		u, err := url.Parse(tc.in)
		require.NoError(t, err)
		_, err = Addr(u)
		require.ErrorContains(t, err, tc.want, tc.in)
		require.NotContains(t, err.Error(), "secret")
		if strings.Contains(tc.want, "scheme") {
			_, err = Tunnel(nil, u, "t:80")
			require.ErrorContains(t, err, tc.want, tc.in)
		}
	}
}

func TestHTTPConnect(t *testing.T) {
	t.Parallel()
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cr:et"))
	for _, tc := range []struct {
		name    string
		user    *url.Userinfo
		answers string
		sent    string
		err     string
		tail    string
	}{
		{
			name:    "no credentials",
			answers: "HTTP/1.1 200 Connection Established\r\n\r\n",
			sent:    "CONNECT gust.test:80 HTTP/1.1\r\nHost: gust.test:80\r\n\r\n",
		},
		{
			name:    "Basic credentials, any 2xx",
			user:    url.UserPassword("alice", "s3cr:et"),
			answers: "HTTP/1.1 204 OK\r\n\r\n",
			sent:    "CONNECT gust.test:80 HTTP/1.1\r\nHost: gust.test:80\r\nProxy-Authorization: " + basic + "\r\n\r\n",
		},
		{
			name:    "bytes of the tunnel in the same segment as the 200",
			answers: "HTTP/1.1 200 OK\r\n\r\nhello",
			sent:    "CONNECT gust.test:80 HTTP/1.1\r\nHost: gust.test:80\r\n\r\n",
			tail:    "hello",
		},
		{
			name:    "refused",
			user:    url.UserPassword("alice", "nope"),
			answers: "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n",
			err:     "proxy http://alice:xxxxx@127.0.0.1:PORT: CONNECT gust.test:80 refused with 407 Proxy Authentication Required",
		},
		{
			name:    "not HTTP",
			answers: "SSH-2.0-x\r\n",
			err:     "reading the CONNECT response: malformed HTTP response",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &url.URL{Scheme: "http", Host: "127.0.0.1:PORT", User: tc.user}
			sent, tail, err := scripted{answers: tc.answers, eof: true}.run(t, u, "gust.test:80", len(tc.tail))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "nope")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.sent, sent)
			require.Equal(t, tc.tail, tail)
		})
	}
}

// TestHTTPConnectKeepsEarlyBytes covers a proxy that sends bytes of the
// tunnel in the same segment as its 200: they must not be lost, and the
// tunnel ends where the proxy's side does.
func TestHTTPConnectKeepsEarlyBytes(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		defer server.Close()
		b := make([]byte, 512)
		if _, err := server.Read(b); err != nil {
			return
		}
		io.WriteString(server, "HTTP/1.1 200 OK\r\n\r\nhello")
	}()
	nc, err := Tunnel(client, &url.URL{Scheme: "http", Host: "proxy"}, "gust.test:80")
	require.NoError(t, err)
	b, err := io.ReadAll(nc)
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}

func TestSOCKS5(t *testing.T) {
	t.Parallel()
	const (
		greetNone = "\x05\x01\x00"     // VER NMETHODS: no authentication
		greetBoth = "\x05\x02\x00\x02" // no authentication, username and password
		reqDomain = "\x05\x01\x00\x03\x09gust.test\x00\x50"
		okIPv4    = "\x05\x00\x00\x01\x7f\x00\x00\x01\x00\x00"
	)
	for _, tc := range []struct {
		name    string
		user    *url.Userinfo
		target  string
		answers string
		eof     bool
		sent    string // what the client sent, when the tunnel opened
		err     string
		tail    string
	}{
		{
			name:    "host name sent to the proxy, bytes after the reply kept",
			answers: "\x05\x00" + okIPv4 + "tail",
			sent:    greetNone + reqDomain,
			tail:    "tail",
		},
		{
			name:    "IPv4 target",
			target:  "127.0.0.1:8080",
			answers: "\x05\x00" + okIPv4,
			sent:    greetNone + "\x05\x01\x00\x01\x7f\x00\x00\x01\x1f\x90",
		},
		{
			name:    "IPv6 target, IPv6 bound address",
			target:  "[::1]:443",
			answers: "\x05\x00" + "\x05\x00\x00\x04" + strings.Repeat("\x00", 15) + "\x01\x01\xbb" + "x",
			sent:    greetNone + "\x05\x01\x00\x04" + strings.Repeat("\x00", 15) + "\x01\x01\xbb",
			tail:    "x",
		},
		{
			name:    "username and password, domain bound address",
			user:    url.UserPassword("bob", "hunter2"),
			answers: "\x05\x02" + "\x01\x00" + "\x05\x00\x00\x03\x09localhost\x00\x00" + "after",
			sent:    greetBoth + "\x01\x03bob\x07hunter2" + reqDomain,
			tail:    "after",
		},
		{
			name:    "credentials offered, none asked for",
			user:    url.User("bob"),
			answers: "\x05\x00" + okIPv4,
			sent:    greetBoth + reqDomain,
		},
		{name: "not SOCKS5", answers: "\x04\x00", err: "not a SOCKS5 server (version 4)"},
		{name: "no method answer", eof: true, err: "reading the SOCKS5 method: EOF"},
		{name: "asks for credentials we lack", answers: "\x05\x02", err: "SOCKS5 server asked for a username and password, and the proxy URL has none"},
		{name: "no acceptable method", answers: "\x05\xff", err: "SOCKS5 server accepts none of our authentication methods"},
		{name: "method not offered", answers: "\x05\x01", err: "SOCKS5 server chose authentication method 1, which was not offered"},
		{name: "empty username", user: url.UserPassword("", "x"), answers: "\x05\x02", err: "SOCKS5 username must be 1 to 255 bytes and password at most 255"},
		{name: "password too long", user: url.UserPassword("bob", strings.Repeat("p", 256)), answers: "\x05\x02", err: "SOCKS5 username must be 1 to 255 bytes and password at most 255"},
		{name: "wrong password", user: url.UserPassword("bob", "guess"), answers: "\x05\x02\x01\x01", err: "SOCKS5 server rejected the username and password"},
		{name: "no authentication status", user: url.UserPassword("bob", "guess"), answers: "\x05\x02", eof: true, err: "reading the SOCKS5 authentication status: EOF"},
		{name: "reply version", answers: "\x05\x00\x04\x00\x00\x01", err: "SOCKS5 reply with version 4"},
		{name: "refused", answers: "\x05\x00\x05\x05\x00\x01", err: "SOCKS5 CONNECT gust.test:80 failed: connection refused (5)"},
		{name: "not allowed", answers: "\x05\x00\x05\x02\x00\x01", err: "SOCKS5 CONNECT gust.test:80 failed: connection not allowed by ruleset (2)"},
		{name: "unknown reply code", answers: "\x05\x00\x05\x09\x00\x01", err: "SOCKS5 CONNECT gust.test:80 failed: unknown error (9)"},
		{name: "unknown address type", answers: "\x05\x00\x05\x00\x00\x09", err: "SOCKS5 reply with address type 9"},
		{name: "no reply", answers: "\x05\x00", eof: true, err: "reading the SOCKS5 reply: EOF"},
		{name: "short reply", answers: "\x05\x00\x05\x00", eof: true, err: "reading the SOCKS5 reply: unexpected EOF"},
		{name: "short bound domain", answers: "\x05\x00\x05\x00\x00\x03", eof: true, err: "reading the SOCKS5 reply: EOF"},
		{name: "short bound address", answers: "\x05\x00\x05\x00\x00\x01\x7f\x00", eof: true, err: "reading the SOCKS5 reply: unexpected EOF"},
		{name: "invalid port", target: "gust.test:99999", err: `invalid port "99999"`},
		{name: "no port", target: "gust.test", err: "missing port in address"},
		{name: "host name too long", target: strings.Repeat("h", 256) + ":80", err: "too long for SOCKS5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == "" {
				target = "gust.test:80"
			}
			u := &url.URL{Scheme: "socks5h", Host: "127.0.0.1:1080", User: tc.user}
			sent, tail, err := scripted{answers: tc.answers, eof: tc.eof}.run(t, u, target, len(tc.tail))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.True(t, strings.HasPrefix(err.Error(), "proxy socks5h://"), err.Error())
				for _, secret := range []string{"guess", "hunter2"} {
					require.NotContains(t, err.Error(), secret)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.sent, sent)
			require.Equal(t, tc.tail, tail)
		})
	}
}
