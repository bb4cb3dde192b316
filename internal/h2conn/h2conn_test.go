package h2conn

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests in a child process started with
// GODEBUG=http2xconnect=1, without which Go's HTTP/2 server offers no
// extended CONNECT (it reads the setting once, at start), and fails the run
// when goroutines outlive the tests.
func TestMain(m *testing.M) {
	if godebug := os.Getenv("GODEBUG"); !strings.Contains(godebug, "http2xconnect=1") {
		if godebug != "" {
			godebug += ","
		}
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), "GODEBUG="+godebug+"http2xconnect=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			fmt.Fprintln(os.Stderr, "running the tests with GODEBUG=http2xconnect=1:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if leaked := leakcheck.Leaked(5*time.Second, "github.com/gustws/gust/internal/h2conn"); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// serve starts an HTTP/2 server whose handler is h, and returns a function
// that dials it: a TLS connection that negotiated h2, and the URL.
func serve(t *testing.T, h http.HandlerFunc) func() (*tls.Conn, *url.URL) {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	u.Scheme = "wss"
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.NextProtos = []string{"h2"}
	return func() (*tls.Conn, *url.URL) {
		tc, err := tls.Dial("tcp", u.Host, cfg)
		require.NoError(t, err)
		require.Equal(t, "h2", tc.ConnectionState().NegotiatedProtocol)
		return tc, u
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestEcho opens a stream with Connect, which a handler accepts and echoes,
// and checks both ends: the request's fields, bytes both ways, Close twice,
// deadlines after Close, the addresses.
func TestEcho(t *testing.T) {
	type seen struct {
		method, protocol, host, field string
		local, remote                 string
		closeAgain, deadline          error
	}
	seenc := make(chan seen, 1)
	dial := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Answer", "yes")
		s, err := Accept(w, r)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(s, s) // until the client ends its side
		s.Close()
		seenc <- seen{r.Method, r.Header.Get(":protocol"), r.Host, r.Header.Get("X-Field"),
			s.LocalAddr().String(), s.RemoteAddr().String(), s.Close(), s.SetReadDeadline(time.Now())}
	})
	tc, u := dial()
	s, resp, err := Connect(testContext(t), tc, u, "example.com", http.Header{"X-Field": {"v"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "yes", resp.Header.Get("X-Answer"))
	require.Equal(t, tc.LocalAddr(), s.LocalAddr())
	require.Contains(t, s.String(), tc.RemoteAddr().String())

	for _, msg := range []string{"hello", strings.Repeat("x", 100_000)} {
		_, err = s.Write([]byte(msg))
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(s, got)
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
	}
	require.NoError(t, s.SetWriteDeadline(time.Now().Add(-time.Second)))
	_, err = s.Write([]byte("late"))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, s.SetWriteDeadline(time.Time{}))

	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Close(), net.ErrClosed)
	got := <-seenc
	require.Equal(t, http.MethodConnect, got.method)
	require.Equal(t, "websocket", got.protocol)
	require.Equal(t, "example.com", got.host)
	require.Equal(t, "v", got.field)
	require.Equal(t, tc.RemoteAddr().String(), got.local, "the server's local address, from the request's context")
	require.Equal(t, tc.LocalAddr().String(), got.remote)
	require.ErrorIs(t, got.closeAgain, net.ErrClosed)
	require.ErrorIs(t, got.deadline, net.ErrClosed, "no ResponseController call once closed")
}

// TestServerStreamIsDelivered: the method gust asks for before it skips
// the linger of a failed connection.
func TestServerStreamIsDelivered(t *testing.T) {
	var c net.Conn = &ServerStream{}
	_, ok := c.(interface{ Delivered() })
	require.True(t, ok)
	var cc net.Conn = &ClientStream{}
	_, ok = cc.(interface{ Delivered() })
	require.False(t, ok, "a client's stream runs over its own TCP connection")
}

// TestConnectRefused: a non-2xx answer comes back with the stream, for the
// caller to read the body of and close.
func TestConnectRefused(t *testing.T) {
	dial := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "go away", http.StatusForbidden)
	})
	tc, u := dial()
	s, resp, err := Connect(testContext(t), tc, u, "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "go away\n", string(body))
	require.NoError(t, s.Close())
}

// TestConnectContentLength: a 2xx with a Content-Length is
// ErrContentLength, and the connection is closed.
func TestConnectContentLength(t *testing.T) {
	dial := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	})
	tc, u := dial()
	s, resp, err := Connect(testContext(t), tc, u, "", nil)
	require.ErrorIs(t, err, ErrContentLength)
	require.Nil(t, s)
	require.Nil(t, resp)
	_, err = tc.Write([]byte("x"))
	require.Error(t, err, "tc is closed")
}

// TestConnectContextEnds: ctx bounds the wait for the answer.
func TestConnectContextEnds(t *testing.T) {
	release := make(chan struct{})
	dial := serve(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
	})
	defer close(release)
	tc, u := dial()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s, _, err := Connect(ctx, tc, u, "", nil)
	require.Error(t, err)
	require.Nil(t, s)
}

// TestServerCloseEndsABlockedWrite: a handler's write that waits for the
// peer's flow-control window ends when the stream is closed from another
// goroutine.
func TestServerCloseEndsABlockedWrite(t *testing.T) {
	done := make(chan error, 1)
	dial := serve(t, func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r)
		if err != nil {
			done <- err
			return
		}
		time.AfterFunc(300*time.Millisecond, func() { s.Close() })
		chunk := make([]byte, 64<<10)
		for {
			if _, err := s.Write(chunk); err != nil {
				done <- err
				return
			}
		}
	})
	tc, u := dial()
	s, _, err := Connect(testContext(t), tc, u, "", nil)
	require.NoError(t, err)
	defer s.Close()
	select { // the client reads nothing: the server fills the window
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked write did not end")
	}
}

// TestClientWriteDeadlineEndsABlockedWrite: a client's write that waits for
// the server's window ends when the deadline passes (the timer breaks the
// pipe, and the write reports io.ErrClosedPipe), and writes after it fail
// with os.ErrDeadlineExceeded.
func TestClientWriteDeadlineEndsABlockedWrite(t *testing.T) {
	release := make(chan struct{})
	dial := serve(t, func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r)
		if err != nil {
			return
		}
		<-release // reads nothing
		s.Close()
	})
	defer close(release)
	tc, u := dial()
	s, _, err := Connect(testContext(t), tc, u, "", nil)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.SetWriteDeadline(time.Now().Add(300*time.Millisecond)))
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		if _, err = s.Write(chunk); err != nil {
			break
		}
	}
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	_, err = s.Write(chunk)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}
