package gust

import (
	"bufio"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tlsServerCert is one certificate for the tests' TLS servers, made once.
var tlsServerCert = sync.OnceValue(func() tls.Certificate {
	cert, _ := testCert(&testing.T{}, "127.0.0.1")
	return cert
})

// serveTLSServer serves a Server over TLS (ServeTLS) and returns its
// address as tls://host:port, which dialRaw dials with TLS.
func serveTLSServer(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
	t.Helper()
	s := newServer(h, opts)
	if set != nil {
		set(&s.Upgrader)
	}
	s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{tlsServerCert()}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	})
	return "tls://" + ln.Addr().String()
}

var tlsNetpollMode = serverMode{"server-tls-netpoll", "tls", inNetpoll(serveTLSServer)}

// dialTLS connects to a tls:// address and completes the handshake.
func dialTLS(t *testing.T, addr string, after []byte, headers ...string) *rawClient {
	t.Helper()
	addr = strings.TrimPrefix(addr, "tls://")
	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	require.NoError(t, err)
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: tc, br: bufio.NewReader(tc)}
	c.lastResp = c.rawRequest(handshakeRequest(addr, headers...))
	if len(after) > 0 {
		c.send(after)
	}
	return c
}

// dialNet connects to addr, with TLS for a tls:// address.
func dialNet(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := dialAddr(addr)
	require.NoError(t, err)
	return nc
}

// dialAddr is dialNet without a test.
func dialAddr(addr string) (net.Conn, error) {
	if host, ok := strings.CutPrefix(addr, "tls://"); ok {
		return tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true})
	}
	return net.Dial("tcp", addr)
}

// tcpOf returns the TCP connection under a client's connection, TLS or not.
func tcpOf(nc net.Conn) *net.TCPConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	return nc.(*net.TCPConn)
}

// ServeTLS serves TLS on a listener of the caller's, in either mode; a
// certificate it cannot load fails it, and closes the listener.
func TestServeTLS(t *testing.T) {
	for _, netpoll := range []bool{false, true} {
		h := newEcho()
		c := dialRaw(t, serveTLSServer(t, h, &Options{Netpoll: netpoll}, nil), nil)
		_, isTLS := h.waitOpen(t).NetConn().(*tls.Conn)
		require.True(t, isTLS)
		c.send(frame(0x81, []byte("over TLS")))
		c.expectMessage(OpText, []byte("over TLS"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := newServer(newEcho(), nil)
	require.ErrorIs(t, s.ServeTLS(ln, filepath.Join(t.TempDir(), "missing.pem"), "missing.key"), os.ErrNotExist)
	_, err = ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}
