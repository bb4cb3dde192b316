// Package proxy opens a client's tunnel through a proxy, written from the
// RFCs so that gust's core keeps no dependency: HTTP CONNECT (RFC 9110
// §9.3.6) with Basic credentials, and SOCKS5 (RFC 1928) with no
// authentication or a username and password (RFC 1929).
//
// The caller connects to [Addr] and passes that connection to [Tunnel];
// bounding both with its context (a deadline on the connection, closing it
// when the context ends) is the caller's part.
package proxy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Addr is the address ("host:port") to connect to for the proxy at u: its
// host, with the scheme's default port (80 for http, 1080 for socks5 and
// socks5h) unless u has one. It refuses other schemes and a URL without a
// host.
func Addr(u *url.URL) (string, error) {
	var port string
	switch strings.ToLower(u.Scheme) {
	case "http":
		port = "80"
	case "socks5", "socks5h":
		port = "1080"
	default:
		return "", errScheme(u)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("proxy %s: no host", u.Redacted())
	}
	if p := u.Port(); p != "" {
		port = p
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

func errScheme(u *url.URL) error {
	return fmt.Errorf("proxy %s: unsupported scheme %q (http, socks5 and socks5h are)", u.Redacted(), u.Scheme)
}

// Tunnel asks the proxy at u, over nc (a connection to [Addr](u)), for a
// TCP connection to target ("host:port"), with the credentials of u's
// userinfo, and returns the connection to use from then on: nc, or nc
// with bytes the proxy sent early put in front. Its errors name the proxy
// without its password.
func Tunnel(nc net.Conn, u *url.URL, target string) (net.Conn, error) {
	var err error
	switch strings.ToLower(u.Scheme) {
	case "http":
		nc, err = httpConnect(nc, u, target)
	case "socks5", "socks5h":
		err = socks5Connect(nc, u, target)
	default:
		return nil, errScheme(u)
	}
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", u.Redacted(), err)
	}
	return nc, nil
}

// httpConnect opens a tunnel with an HTTP CONNECT request.
func httpConnect(nc net.Conn, u *url.URL, target string) (net.Conn, error) {
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if u.User != nil {
		pass, _ := u.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)) + "\r\n"
	}
	if _, err := io.WriteString(nc, req+"\r\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, fmt.Errorf("reading the CONNECT response: %w", err)
	}
	// Any 2xx opens the tunnel (RFC 9110 §9.3.6); the response has no body.
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("CONNECT %s refused with %s", target, resp.Status)
	}
	if br.Buffered() > 0 {
		// The server spoke before the client: keep its bytes.
		b, _ := br.Peek(br.Buffered())
		return &prefixConn{Conn: nc, prefix: append([]byte(nil), b...)}, nil
	}
	return nc, nil
}

// prefixConn is a net.Conn whose first reads return bytes read ahead.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
