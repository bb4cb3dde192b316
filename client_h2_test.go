package gust

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/h2conn"
	"github.com/gustws/gust/internal/handshake"
	"github.com/stretchr/testify/require"
)

// dialH2Options trusts the httptest server behind addr (from startH2).
func dialH2Options(t *testing.T, addr string) (string, *DialOptions) {
	v, ok := h2Servers.Load(addr)
	require.True(t, ok)
	srv := v.(*h2Server)
	roots := srv.client.Transport.(*http.Transport).TLSClientConfig.RootCAs
	return "wss://" + strings.TrimPrefix(srv.url, "https://") + "/ws", &DialOptions{
		Options:   Options{Compression: CompressionOptions{Enabled: true}},
		TLSConfig: &tls.Config{RootCAs: roots},
		HTTP2:     true,
	}
}

func TestDialH2Echo(t *testing.T) {
	t.Parallel()
	server := newEcho()
	addr := startH2(t, server, &Options{Compression: CompressionOptions{Enabled: true}})
	url, opts := dialH2Options(t, addr)
	h := newRecorder()
	c, resp, err := Dial(context.Background(), url, h, opts)
	require.NoError(t, err)
	require.Equal(t, 2, resp.ProtoMajor)
	require.True(t, c.Compressed())
	go c.ReadLoop()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	for _, m := range []struct {
		op Opcode
		p  []byte
	}{{OpText, []byte("hello over h2")}, {OpBinary, []byte{1, 2, 3}}, {OpBinary, big}} {
		require.NoError(t, c.WriteMessage(m.op, m.p))
		got := h.waitMessage(t)
		require.Equal(t, m.op, got.op)
		require.Equal(t, m.p, got.data)
	}
	require.NoError(t, c.Close(StatusNormalClosure, "done"))
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
	require.Equal(t, StatusNormalClosure, CloseStatus(server.waitClose(t)))
}

func TestDialH2FallsBackWhenTheServerSpeaksHTTP1(t *testing.T) {
	t.Parallel()
	u := newUpgrader(newEcho(), nil)
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err == nil {
			c.ReadLoop()
		}
	}))
	defer ts.Close()
	h := newRecorder()
	opts := &DialOptions{TLSConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig, HTTP2: true}
	c, resp, err := Dial(context.Background(), "wss://"+strings.TrimPrefix(ts.URL, "https://"), h, opts)
	require.NoError(t, err)
	require.Equal(t, 1, resp.ProtoMajor)
	go c.ReadLoop()
	require.NoError(t, c.WriteString("plain"))
	m := h.waitMessage(t)
	require.Equal(t, "plain", string(m.data))
	require.NoError(t, c.Close(StatusNormalClosure, ""))
	h.waitClose(t)
}

// TestDialH2BadServerFrames runs frame-level failures the other way: a
// server that breaks the protocol on an HTTP/2 stream, and gust's client.
func TestDialH2BadServerFrames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		send []byte
		code StatusCode
	}{
		{"masked server frame", encodeFrame(0x81, []byte("x"), true), StatusProtocolError},
		{"reserved bit", encodeFrame(0xA1, []byte("x"), false), StatusProtocolError},
		{"bad UTF-8", encodeFrame(0x81, []byte("\xff"), false), StatusInvalidFramePayloadData},
		{"fragmented ping", encodeFrame(0x09, nil, false), StatusProtocolError},
		{"continuation first", encodeFrame(0x80, []byte("x"), false), StatusProtocolError},
		{"too big", encodeFrame(0x82, make([]byte, 2000), false), StatusMessageTooBig},
		{"close code 1005", encodeFrame(0x88, closePayload(1005, ""), false), StatusProtocolError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan []byte, 1)
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				rc := http.NewResponseController(w)
				rc.Flush()
				w.Write(tt.send)
				rc.Flush()
				// Read the client's close frame (masked) and report its payload.
				f, err := readWireFrame(r.Body)
				if err != nil {
					got <- nil
					return
				}
				got <- append([]byte{f.b0}, f.payload...)
			}))
			ts.EnableHTTP2 = true
			ts.StartTLS()
			defer ts.Close()
			h := newRecorder()
			opts := &DialOptions{Options: Options{MaxMessageSize: 1000},
				TLSConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig, HTTP2: true}
			c, resp, err := Dial(context.Background(), "wss://"+strings.TrimPrefix(ts.URL, "https://"), h, opts)
			require.NoError(t, err)
			require.Equal(t, 2, resp.ProtoMajor)
			go c.ReadLoop()
			var pe *ProtocolError
			require.ErrorAs(t, h.waitClose(t), &pe)
			require.Equal(t, tt.code, pe.Code)
			f := <-got
			require.NotNil(t, f)
			require.Equal(t, byte(0x88), f[0])
			require.Equal(t, closePayload(tt.code, "")[:2], f[1:3])
		})
	}
}

// echoAndClose runs c, sends a message through the echo server behind it and
// closes it, failing if the connection ends before the echo comes back.
func echoAndClose(t *testing.T, c *Conn, h *recorder) {
	t.Helper()
	go c.ReadLoop()
	require.NoError(t, c.WriteString("ping"))
	require.Equal(t, "ping", string(h.waitMessage(t).data), "the echo")
	require.NoError(t, c.Close(StatusNormalClosure, ""))
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
}

// countDials counts the TCP connections a Dial opens.
func countDials(n *atomic.Int32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

// TestDialH2ContentLengthOnConnect dials a server that sends
// content-length: 0 on its 200 to the extended CONNECT, as Jetty 12.0.16
// does. RFC 9110 §9.3.6 forbids it and tells the client to ignore it;
// net/http's HTTP/2 transport enforces it instead, so Dial has to redo the
// handshake over HTTP/1.1.
func TestDialH2ContentLengthOnConnect(t *testing.T) {
	t.Parallel()
	u := newUpgrader(newEcho(), nil)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Upgrade drops a Content-Length set on w before it: slip one
		// in as the 200 goes out.
		c, err := u.Upgrade(contentLengthWriter{w}, r)
		if err == nil {
			c.ReadLoop()
		}
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)

	// Go's HTTP/2 server sends the header and lets the stream carry data
	// all the same; net/http's client cuts the stream at the declared
	// length. Should the client ever ignore the header, the fallback below
	// is no longer needed.
	addr := "h2://" + ts.Listener.Addr().String()
	h2Servers.Store(addr, &h2Server{client: ts.Client(), url: ts.URL})
	t.Cleanup(func() { h2Servers.Delete(addr) })
	raw := dialH2(t, addr, nil)
	require.Equal(t, []string{"0"}, raw.lastResp.Header.Values("Content-Length"))
	raw.send(frame(0x81, []byte("hi")))
	_, _, err := raw.readFrame()
	require.ErrorContains(t, err, "more than declared Content-Length")

	var dials atomic.Int32
	h := newRecorder()
	opts := &DialOptions{TLSConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig,
		NetDialContext: countDials(&dials), HTTP2: true}
	c, resp, err := Dial(testContext(t), "wss://"+strings.TrimPrefix(ts.URL, "https://"), h, opts)
	require.NoError(t, err)
	echoAndClose(t, c, h)
	require.Equal(t, 1, resp.ProtoMajor)
	require.Equal(t, int32(2), dials.Load(), "an HTTP/2 connection, then an HTTP/1.1 one")
}

// contentLengthWriter adds content-length: 0 to the response's header as
// it is written.
type contentLengthWriter struct{ http.ResponseWriter }

func (w contentLengthWriter) WriteHeader(status int) {
	w.Header().Set("Content-Length", "0")
	w.ResponseWriter.WriteHeader(status)
}

func (w contentLengthWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// h2ChildEnv, set to a directory holding cert.pem and key.pem (from
// writeCert), makes the test binary run serveH2Child instead of the tests.
const h2ChildEnv = "GUST_TEST_H2_SERVER"

// serveH2Child is the child process of startH2Child: an HTTPS server with
// HTTP/2 and gust's Upgrader in front of an echo handler. It prints its
// address, then serves until stdin closes or a minute has passed.
func serveH2Child(dir string) int {
	u := newUpgrader(newEcho(), nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err == nil {
			c.ReadLoop()
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "HTTP/2 child server:", err)
		return 1
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")) }()
	fmt.Println(ln.Addr())
	stdinClosed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stdinClosed:
	case <-time.After(time.Minute):
	case err := <-served:
		fmt.Fprintln(os.Stderr, "HTTP/2 child server:", err)
		return 1
	}
	srv.Close()
	return 0
}

// startH2Child runs serveH2Child in a child process whose GODEBUG lacks
// the http2xconnect=1 that TestMain gives this one, so that Go's HTTP/2
// server there does not offer extended CONNECT. It returns the server's
// address and a pool that trusts its certificate; the child is stopped
// when the test ends.
func startH2Child(t *testing.T) (addr string, pool *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	cert, pool := testCert(t, "127.0.0.1")
	writeCert(t, dir, cert)
	var godebug []string
	for _, s := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if name, _, _ := strings.Cut(s, "="); s != "" && name != "http2xconnect" {
			godebug = append(godebug, s)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), h2ChildEnv+"="+dir, "GODEBUG="+strings.Join(godebug, ","))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close() // the child's signal to stop
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("the HTTP/2 child server did not stop when its stdin closed")
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		addr = strings.TrimSpace(s)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill() // ends the read above
		t.Fatal("the HTTP/2 child server did not print its address")
	}
	require.NotEmpty(t, addr, "the HTTP/2 child server exited before printing its address")
	return addr, pool
}

// TestDialH2FallsBackWithoutExtendedConnect dials a Go HTTP/2 server that
// does not offer extended CONNECT. h2conn.Connect recognises net/http's
// refusal by its message (net/http exports no error for it), so this test
// is what notices when the message changes.
func TestDialH2FallsBackWithoutExtendedConnect(t *testing.T) {
	t.Parallel()
	addr, pool := startH2Child(t)
	var dials atomic.Int32
	opts := &DialOptions{TLSConfig: &tls.Config{RootCAs: pool},
		NetDialContext: countDials(&dials), HTTP2: true}

	// The HTTP/2 attempt alone: it must end in h2conn.ErrNoExtendedConnect,
	// which tells Dial to try HTTP/1.1.
	ctx := testContext(t)
	d, err := newDialer(opts)
	require.NoError(t, err)
	wsURL, err := handshake.ParseURL("wss://" + addr + "/")
	require.NoError(t, err)
	nc, _, release, err := d.net.Open(ctx, wsURL)
	require.NoError(t, err)
	tc := nc.(*tls.Conn)
	require.Equal(t, "h2", tc.ConnectionState().NegotiatedProtocol)
	_, _, err = d.handshakeH2(ctx, tc, wsURL, nil, release)
	require.ErrorIs(t, err, h2conn.ErrNoExtendedConnect)
	require.ErrorIs(t, err, errTryHTTP1)
	require.EqualError(t, err, "gust: no WebSocket over this HTTP/2 server: it does not allow extended CONNECT")

	// Dial: the same attempt, then HTTP/1.1 on a new connection.
	dials.Store(0)
	h := newRecorder()
	c, resp, err := Dial(ctx, wsURL.String(), h, opts)
	require.NoError(t, err)
	echoAndClose(t, c, h)
	require.Equal(t, 1, resp.ProtoMajor)
	require.Equal(t, int32(2), dials.Load(), "an HTTP/2 connection, then an HTTP/1.1 one")
}

// TestDialH2BadAcceptIsHandshakeError: a server that accepts the extended
// CONNECT (200) but breaks RFC 6455 doing so, here with a subprotocol the
// client did not offer, gives the *HandshakeError the docs describe for a
// broken 101: the status the server accepted with, Err set, and the "bad
// handshake response" prefix.
func TestDialH2BadAcceptIsHandshakeError(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Sec-WebSocket-Protocol", "not.offered")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	opts := &DialOptions{TLSConfig: ts.Client().Transport.(*http.Transport).TLSClientConfig, HTTP2: true}
	_, resp, err := Dial(context.Background(), "wss://"+strings.TrimPrefix(ts.URL, "https://"), nil, opts)
	var he *HandshakeError
	require.ErrorAs(t, err, &he)
	require.NotNil(t, resp)
	require.Equal(t, 2, resp.ProtoMajor)
	require.Equal(t, http.StatusOK, he.Status)
	require.Error(t, he.Err)
	require.ErrorContains(t, err, "gust: dial wss://"+strings.TrimPrefix(ts.URL, "https://")+": bad handshake response: ")
	require.ErrorContains(t, err, "not.offered")
}
