package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
)

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

// socks5Connect asks a SOCKS5 proxy for a TCP connection to target: the
// method negotiation, then the CONNECT request and its reply.
func socks5Connect(nc net.Conn, u *url.URL, target string) error {
	req, err := socks5Request(target)
	if err != nil {
		return err
	}
	if err := socks5Negotiate(nc, u.User); err != nil {
		return err
	}
	if _, err := nc.Write(req); err != nil {
		return err
	}
	return socks5Reply(nc, target)
}

// socks5Request is the CONNECT request for target. A host name goes to the
// proxy as it is (ATYP 3), so the proxy resolves it.
func socks5Request(target string) ([]byte, error) {
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("invalid port %q", portStr)
	}
	req := []byte{socksVersion, socksConnect, 0}
	if ip := net.ParseIP(host); ip != nil {
		if ip4 := ip.To4(); ip4 != nil {
			req = append(append(req, socksIPv4), ip4...)
		} else {
			req = append(append(req, socksIPv6), ip.To16()...)
		}
	} else {
		if len(host) > 255 {
			return nil, fmt.Errorf("host name %q too long for SOCKS5", host)
		}
		req = append(append(req, socksDomain, byte(len(host))), host...)
	}
	return binary.BigEndian.AppendUint16(req, uint16(port)), nil
}

// socks5Negotiate offers the authentication methods we can do (none, and a
// username and password when user is not nil) and runs the one the proxy
// chooses.
func socks5Negotiate(nc net.Conn, user *url.Userinfo) error {
	methods := []byte{socksVersion, 1, socksNoAuth}
	if user != nil {
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
		return nil
	case socksUserPass:
		if user == nil {
			return errors.New("SOCKS5 server asked for a username and password, and the proxy URL has none")
		}
		return socks5Auth(nc, user)
	case socksNoAcceptable:
		return errors.New("SOCKS5 server accepts none of our authentication methods")
	default:
		return fmt.Errorf("SOCKS5 server chose authentication method %d, which was not offered", b[1])
	}
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

// socks5Reply reads the reply to the CONNECT request for target (VER REP
// RSV ATYP BND.ADDR BND.PORT) exactly, so that no byte of the tunnel is
// taken, and reports a refusal.
func socks5Reply(nc net.Conn, target string) error {
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
