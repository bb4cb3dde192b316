package handoff

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
	"github.com/gustws/gust/internal/selfsigned"
	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/internal/handoff"))
}

// A Conn's reads return its own copy of the bytes put back, in pieces as
// small as the reader asks, then the connection's.
func TestConnReadsAheadFirst(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ahead := []byte("GET / ")
	c := NewConn(a, ahead)
	ahead[0] = 'X' // the caller's buffer is reused
	go func() {
		b.Write([]byte("HTTP/1.1"))
		b.Close()
	}()

	p := make([]byte, 4)
	n, err := c.Read(p)
	require.NoError(t, err)
	require.Equal(t, "GET ", string(p[:n]))
	n, err = c.Read(p)
	require.NoError(t, err)
	require.Equal(t, "/ ", string(p[:n]), "a read stops at the end of the bytes put back")
	require.Nil(t, c.Ahead, "the copy is let go")
	rest, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1", string(rest))

	require.Empty(t, NewConn(a, nil).Ahead)
}

// CloseWrite half-closes a TCP connection, so that the peer reads to EOF
// and can still answer, and is unsupported on a connection without one.
func TestConnCloseWrite(t *testing.T) {
	a, b := testkit.TCPPair(t)
	c := NewConn(a, nil)
	_, err := c.Write([]byte("response"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	got, err := io.ReadAll(b)
	require.NoError(t, err)
	require.Equal(t, "response", string(got))
	_, err = b.Write([]byte("still open"))
	require.NoError(t, err)
	p := make([]byte, 10)
	_, err = io.ReadFull(c, p)
	require.NoError(t, err)
	require.Equal(t, "still open", string(p))

	pa, pb := net.Pipe()
	defer pa.Close()
	defer pb.Close()
	require.ErrorIs(t, NewConn(pa, nil).CloseWrite(), errors.ErrUnsupported)
}

// A Listener's Accept returns what Hand passes, until Close; then Accept
// returns net.ErrClosed and Hand closes what it is given.
func TestListener(t *testing.T) {
	l := NewListener()
	require.Equal(t, "gust", l.Addr().Network())
	require.Equal(t, "gust.Server", l.Addr().String())

	a, b := net.Pipe()
	defer b.Close()
	go l.Hand(a)
	nc, err := l.Accept()
	require.NoError(t, err)
	require.Same(t, a, nc)

	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	require.NoError(t, l.Close())
	require.ErrorIs(t, <-accepted, net.ErrClosed, "Close ends a waiting Accept")
	require.NoError(t, l.Close(), "twice is harmless")
	_, err = l.Accept()
	require.ErrorIs(t, err, net.ErrClosed)

	c, d := net.Pipe()
	l.Hand(c) // returns at once: nobody accepts
	_, err = d.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection was closed")
}

// An http.Server fed through a Listener with ConnContext and WithTLSState
// serves the bytes put back as the start of its request, and gives the
// handler r.TLS for a TLS connection, and nil for a plain one.
func TestServeThroughListener(t *testing.T) {
	cert, err := selfsigned.Cert(nil, "127.0.0.1")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)

	l := NewListener()
	srv := &http.Server{
		Handler: WithTLSState(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.TLS == nil:
				io.WriteString(w, "plain "+r.URL.Path)
			default:
				io.WriteString(w, tls.VersionName(r.TLS.Version)+" "+r.URL.Path)
			}
		})),
		ConnContext: ConnContext,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		require.NoError(t, srv.Shutdown(context.Background()))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	}()

	get := func(client net.Conn, path string) string {
		t.Helper()
		client.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(client, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}

	// Plain: the server had read the first bytes of the request line.
	client, server := testkit.TCPPair(t)
	go func() {
		ahead := make([]byte, 4)
		io.ReadFull(server, ahead)
		l.Hand(NewConn(server, ahead))
	}()
	require.Equal(t, "plain /a", get(client, "/a"))

	// TLS: the server made the tls.Conn and read the first bytes over it.
	rawClient, rawServer := testkit.TCPPair(t)
	go func() {
		tc := tls.Server(rawServer, &tls.Config{Certificates: []tls.Certificate{cert}})
		ahead := make([]byte, 4)
		if _, err := io.ReadFull(tc, ahead); err != nil {
			tc.Close()
			return
		}
		l.Hand(NewConn(tc, ahead))
	}()
	tlsClient := tls.Client(rawClient, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	require.Equal(t, "TLS 1.3 /b", get(tlsClient, "/b"))
}
