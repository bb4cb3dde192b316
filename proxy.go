package gust

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Proxies for Dial, written from their RFCs so that the core keeps no
// dependency: HTTP CONNECT (RFC 9110 §9.3.6) with Basic credentials, and
// SOCKS5 (RFC 1928) with no authentication or a username and password
// (RFC 1929). Each runs over a connection to the proxy that Dial opened
// and bounds with its context.

// proxyAddr is the address to connect to for the proxy at pu.
func proxyAddr(pu *url.URL) (string, error) {
	var port string
	switch strings.ToLower(pu.Scheme) {
	case "http":
		port = "80"
	case "socks5", "socks5h":
		port = "1080"
	default:
		return "", fmt.Errorf("proxy %s: unsupported scheme %q (http, socks5 and socks5h are)", pu.Redacted(), pu.Scheme)
	}
	if pu.Hostname() == "" {
		return "", fmt.Errorf("proxy %s: no host", pu.Redacted())
	}
	if p := pu.Port(); p != "" {
		port = p
	}
	return net.JoinHostPort(pu.Hostname(), port), nil
}

// tunnel asks the proxy at pu, over nc, for a connection to target
// ("host:port") and returns the connection to use from then on.
func tunnel(nc net.Conn, pu *url.URL, target string) (net.Conn, error) {
	var err error
	switch strings.ToLower(pu.Scheme) {
	case "http":
		nc, err = httpConnect(nc, pu, target)
	default: // socks5, socks5h: proxyAddr checked the scheme
		err = socks5Connect(nc, pu, target)
	}
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", pu.Redacted(), err)
	}
	return nc, nil
}

// httpConnect opens a tunnel with an HTTP CONNECT request.
func httpConnect(nc net.Conn, pu *url.URL, target string) (net.Conn, error) {
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if pu.User != nil {
		pass, _ := pu.User.Password()
		req += "Proxy-Authorization: Basic " + basicAuth(pu.User.Username(), pass) + "\r\n"
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

// SOCKS5 constants from RFC 1928 and RFC 1929.
const (
	socksVersion      = 5
	socksNoAuth       = 0x00
	socksUserPass     = 0x02
	socksNoAcceptable = 0xff
	socksConnect      = 0x01
	socksIPv4         = 0x01
	socksDomain       = 0x03
	socksIPv6         = 0x04
	socksAuthVersion  = 0x01
)

var socksReplies = [...]string{
	1: "general SOCKS server failure",
	2: "connection not allowed by ruleset",
	3: "network unreachable",
	4: "host unreachable",
	5: "connection refused",
	6: "TTL expired",
	7: "command not supported",
	8: "address type not supported",
}

// socks5Connect asks a SOCKS5 proxy for a TCP connection to target. A
// host name goes to the proxy as it is (ATYP 3), so the proxy resolves it.
func socks5Connect(nc net.Conn, pu *url.URL, target string) error {
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return fmt.Errorf("invalid port %q", portStr)
	}

	// Greeting: the methods we can do.
	methods := []byte{socksVersion, 1, socksNoAuth}
	if pu.User != nil {
		methods = []byte{socksVersion, 2, socksNoAuth, socksUserPass}
	}
	if _, err := nc.Write(methods); err != nil {
		return err
	}
	var b [2]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return fmt.Errorf("reading the SOCKS5 method: %w", err)
	}
	if b[0] != socksVersion {
		return fmt.Errorf("not a SOCKS5 server (version %d)", b[0])
	}
	switch b[1] {
	case socksNoAuth:
	case socksUserPass:
		if pu.User == nil {
			return errors.New("SOCKS5 server asked for a username and password, and the proxy URL has none")
		}
		if err := socks5Auth(nc, pu.User); err != nil {
			return err
		}
	case socksNoAcceptable:
		return errors.New("SOCKS5 server accepts none of our authentication methods")
	default:
		return fmt.Errorf("SOCKS5 server chose authentication method %d, which was not offered", b[1])
	}

	// CONNECT request.
	req := []byte{socksVersion, socksConnect, 0}
	if ip := net.ParseIP(host); ip != nil {
		if ip4 := ip.To4(); ip4 != nil {
			req = append(append(req, socksIPv4), ip4...)
		} else {
			req = append(append(req, socksIPv6), ip.To16()...)
		}
	} else {
		if len(host) > 255 {
			return fmt.Errorf("host name %q too long for SOCKS5", host)
		}
		req = append(append(req, socksDomain, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := nc.Write(req); err != nil {
		return err
	}

	// Reply: VER REP RSV ATYP BND.ADDR BND.PORT, read exactly.
	var rep [4]byte
	if _, err := io.ReadFull(nc, rep[:]); err != nil {
		return fmt.Errorf("reading the SOCKS5 reply: %w", err)
	}
	if rep[0] != socksVersion {
		return fmt.Errorf("SOCKS5 reply with version %d", rep[0])
	}
	if rep[1] != 0 {
		msg := "unknown error"
		if int(rep[1]) < len(socksReplies) && socksReplies[rep[1]] != "" {
			msg = socksReplies[rep[1]]
		}
		return fmt.Errorf("SOCKS5 CONNECT %s failed: %s (%d)", target, msg, rep[1])
	}
	var skip int
	switch rep[3] {
	case socksIPv4:
		skip = 4
	case socksIPv6:
		skip = 16
	case socksDomain:
		var n [1]byte
		if _, err := io.ReadFull(nc, n[:]); err != nil {
			return fmt.Errorf("reading the SOCKS5 reply: %w", err)
		}
		skip = int(n[0])
	default:
		return fmt.Errorf("SOCKS5 reply with address type %d", rep[3])
	}
	var rest [255 + 2]byte
	if _, err := io.ReadFull(nc, rest[:skip+2]); err != nil {
		return fmt.Errorf("reading the SOCKS5 reply: %w", err)
	}
	return nil
}

// socks5Auth is the username and password sub-negotiation of RFC 1929.
func socks5Auth(nc net.Conn, user *url.Userinfo) error {
	name := user.Username()
	pass, _ := user.Password()
	if len(name) == 0 || len(name) > 255 || len(pass) > 255 {
		return errors.New("SOCKS5 username must be 1 to 255 bytes and password at most 255")
	}
	req := make([]byte, 0, 3+len(name)+len(pass))
	req = append(req, socksAuthVersion, byte(len(name)))
	req = append(req, name...)
	req = append(req, byte(len(pass)))
	req = append(req, pass...)
	if _, err := nc.Write(req); err != nil {
		return err
	}
	var b [2]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return fmt.Errorf("reading the SOCKS5 authentication status: %w", err)
	}
	if b[0] != socksAuthVersion || b[1] != 0 {
		return errors.New("SOCKS5 server rejected the username and password")
	}
	return nil
}
