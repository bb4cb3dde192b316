package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/internal/selfsigned"
	"github.com/gustws/gust/internal/testkit"
)

type echo struct{ gust.BuiltinEventHandler }

func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	c.WriteMessage(m.Opcode, m.Data)
}

// TestClientAgainstEcho runs the client against a gust echo server with
// every flag: the lines of stdin come back on stdout, in order, the
// subprotocol, compression and header reach the server, and the end of
// stdin closes the connection with a handshake (exit status 0).
func TestClientAgainstEcho(t *testing.T) {
	seen := make(chan http.Header, 1)
	upgrader := &gust.Upgrader{
		Handler:      echo{},
		Subprotocols: []string{"echo.v1"},
		Options:      gust.Options{Compression: gust.CompressionOptions{Enabled: true}},
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
	}))
	defer ts.Close()

	// Typed input: each line is answered before the next is typed, and
	// Ctrl-D (the pipe's end) closes at once with -linger 0.
	var stdout, stderr testkit.Buffer
	stdin, typing := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{
			"-url", "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws",
			"-subprotocol", "other,echo.v1",
			"-compress",
			"-H", "X-Trace: abc 123",
			"-H", "Cookie: id=1",
			"-linger", "0",
		}, stdin, &stdout, &stderr)
	}()
	want := ""
	for _, line := range []string{"hello", "world", strings.Repeat("x", 2000)} {
		_, err := io.WriteString(typing, line+"\n")
		require.NoError(t, err)
		want += "< " + line + "\n"
		require.Eventually(t, func() bool { return stdout.String() == want }, 10*time.Second, 5*time.Millisecond,
			"stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	typing.Close()
	require.Equal(t, 0, <-code, "stderr:\n%s", stderr.String())
	require.Contains(t, stderr.String(), `subprotocol "echo.v1", compression true`)
	require.Contains(t, stderr.String(), "closed: gust: closed, the peer answering with 1000")

	h := <-seen
	require.Equal(t, "abc 123", h.Get("X-Trace"))
	require.Equal(t, "id=1", h.Get("Cookie"))
	require.Equal(t, "other, echo.v1", strings.Join(h.Values("Sec-WebSocket-Protocol"), ", "))
	require.Contains(t, h.Get("Sec-WebSocket-Extensions"), "permessage-deflate")
}

// TestClientPipedInput: with input piped in, the client waits -linger
// after its end for the replies still on their way.
func TestClientPipedInput(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&gust.Upgrader{Handler: echo{}}).Upgrade(w, r)
		if err == nil {
			c.ReadLoop()
		}
	}))
	defer ts.Close()
	var stdout, stderr testkit.Buffer
	code := run(context.Background(), []string{"-url", "ws" + strings.TrimPrefix(ts.URL, "http"), "-linger", "500ms"},
		strings.NewReader("one\ntwo\n"), &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	require.Equal(t, "< one\n< two\n", stdout.String())
}

// TestClientRefused: a refused handshake is reported with its status, and
// the exit status is 1; a bad flag gives 2.
func TestClientRefused(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "go away", http.StatusForbidden)
	}))
	defer ts.Close()
	var stdout, stderr testkit.Buffer
	code := run(context.Background(), []string{"-url", "ws" + strings.TrimPrefix(ts.URL, "http")},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "403")
	require.Contains(t, stderr.String(), "go away")

	require.Equal(t, 2, run(context.Background(), []string{"-H", "no colon"}, strings.NewReader(""), &stdout, &stderr))
}

// TestClientTLS runs the client against a gust Server whose certificate is
// self-signed: refused by default, accepted with -cacert and that
// certificate (quietly), and with -insecure (with a warning on stderr);
// -cacert with another CA is refused. Misused flags exit with status 2.
func TestClientTLS(t *testing.T) {
	cert, err := selfsigned.Cert(nil, "127.0.0.1")
	require.NoError(t, err)
	s := &gust.Server{Upgrader: gust.Upgrader{Handler: echo{}}, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.ServeTLS(ln, "", "") }()
	defer func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-served, gust.ErrServerClosed)
	}()
	url := "wss://" + ln.Addr().String() + "/ws"

	dir := t.TempDir()
	writePEM := func(name string, c tls.Certificate) string {
		certPEM, _, err := selfsigned.PEM(c)
		require.NoError(t, err)
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, certPEM, 0o600))
		return path
	}
	other, err := selfsigned.Cert(nil, "127.0.0.1")
	require.NoError(t, err)
	notPEM := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("no certificate here\n"), 0o600))

	const warning = "WARNING: -insecure"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int    // the exit status
		stderr string // what stderr holds
		echoed bool   // the line came back
	}{
		{"verified by default: refused", []string{"-url", url}, 1, "certificate", false},
		{"-cacert with the certificate", []string{"-url", url, "-cacert", writePEM("ca.pem", cert)}, 0, "connected to", true},
		{"-cacert with another CA", []string{"-url", url, "-cacert", writePEM("other.pem", other)}, 1, "certificate", false},
		{"-insecure", []string{"-url", url, "-insecure"}, 0, warning, true},
		{"-insecure on ws://", []string{"-url", "ws://127.0.0.1:1/ws", "-insecure"}, 2, "wss:// URLs only", false},
		{"-cacert on ws://", []string{"-url", "ws://127.0.0.1:1/ws", "-cacert", notPEM}, 2, "wss:// URLs only", false},
		{"both", []string{"-url", url, "-insecure", "-cacert", notPEM}, 2, "together", false},
		{"-cacert with no file", []string{"-url", url, "-cacert", filepath.Join(dir, "missing.pem")}, 2, "no such file", false},
		{"-cacert with no certificate", []string{"-url", url, "-cacert", notPEM}, 2, "no PEM certificate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr testkit.Buffer
			stdin, typing := io.Pipe()
			defer typing.Close()
			code := make(chan int, 1)
			go func() { code <- run(context.Background(), append(tc.args, "-linger", "0"), stdin, &stdout, &stderr) }()
			if tc.echoed {
				// Typed once connected: a client that exits first never
				// reads it, and the write ends when typing is closed.
				go io.WriteString(typing, "over tls\n")
				require.Eventually(t, func() bool { return stdout.String() == "< over tls\n" || len(code) > 0 },
					10*time.Second, 5*time.Millisecond)
			}
			typing.Close()
			require.Equal(t, tc.code, <-code, "stderr:\n%s", stderr.String())
			require.Contains(t, stderr.String(), tc.stderr)
			if tc.stderr != warning {
				require.NotContains(t, stderr.String(), warning)
			}
			if tc.echoed {
				require.Equal(t, "< over tls\n", stdout.String())
			} else {
				require.Empty(t, stdout.String())
			}
		})
	}
}
