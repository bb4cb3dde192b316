package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// reexecHelper, when set, makes the test binary a stand-in for main's
// start: ensureExtendedConnect, then print what the process ended up with.
const reexecHelper = "GUST_H2_EXAMPLE_REEXEC_HELPER"

// TestMain runs the tests in a child process started with
// GODEBUG=http2xconnect=1: Go's HTTP/2 server reads it once, at init, and
// offers extended CONNECT only then, as the example's main arranges with
// ensureExtendedConnect.
func TestMain(m *testing.M) {
	if os.Getenv(reexecHelper) == "1" {
		ensureExtendedConnect()
		fmt.Printf("pid=%d GODEBUG=%s\n", os.Getpid(), os.Getenv("GODEBUG"))
		os.Exit(0)
	}
	if !extendedConnectEnabled() {
		godebug, _ := godebugWithXConnect(os.Getenv("GODEBUG"))
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = withEnv(os.Environ(), "GODEBUG", godebug)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			os.Exit(0)
		case errors.As(err, &ee):
			os.Exit(ee.ExitCode())
		default:
			fmt.Fprintf(os.Stderr, "running the tests with GODEBUG=%s: %v\n", godebug, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func TestGodebugWithXConnect(t *testing.T) {
	for _, c := range []struct {
		in, want string
		changed  bool
	}{
		{"", "http2xconnect=1", true},
		{"  ", "http2xconnect=1", true},
		{"http2debug=1", "http2debug=1,http2xconnect=1", true},
		{"http2xconnect=1", "http2xconnect=1", false},
		{"http2xconnect=0", "http2xconnect=0", false}, // the user's choice
		{"x=1, http2xconnect=0", "x=1, http2xconnect=0", false},
		{"nothttp2xconnect=1", "nothttp2xconnect=1,http2xconnect=1", true},
	} {
		got, changed := godebugWithXConnect(c.in)
		if got != c.want || changed != c.changed {
			t.Errorf("godebugWithXConnect(%q) = %q, %v; want %q, %v", c.in, got, changed, c.want, c.changed)
		}
	}
	env := withEnv([]string{"A=1", "GODEBUG=x=1", "B=2", "GODEBUG=y=2", "GODEBUGX=3"}, "GODEBUG", "z=3")
	if want := []string{"A=1", "B=2", "GODEBUGX=3", "GODEBUG=z=3"}; strings.Join(env, " ") != strings.Join(want, " ") {
		t.Errorf("withEnv = %q, want %q", env, want)
	}
}

// TestReexec runs ensureExtendedConnect in a process started without
// http2xconnect: it must exec itself (same pid) with GODEBUG gaining it and
// the other settings kept.
func TestReexec(t *testing.T) {
	for _, godebug := range []string{"", "madvdontneed=1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = withEnv(withEnv(os.Environ(), "GODEBUG", godebug), reexecHelper, "1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v; stderr:\n%s", err, stderr.String())
		}
		want := "http2xconnect=1"
		if godebug != "" {
			want = godebug + ",http2xconnect=1"
		}
		if got := strings.TrimSpace(string(out)); got != fmt.Sprintf("pid=%d GODEBUG=%s", cmd.Process.Pid, want) {
			t.Errorf("GODEBUG=%q: the helper printed %q, want pid=%d GODEBUG=%s", godebug, got, cmd.Process.Pid, want)
		}
		if !strings.Contains(stderr.String(), "re-executing") {
			t.Errorf("GODEBUG=%q: no re-exec logged; stderr:\n%s", godebug, stderr.String())
		}
	}
	// An explicit http2xconnect=0 is kept: no re-exec.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = withEnv(withEnv(os.Environ(), "GODEBUG", "http2xconnect=0"), reexecHelper, "1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); strings.Contains(s, "re-executing") || !strings.Contains(s, "GODEBUG=http2xconnect=0\n") {
		t.Errorf("GODEBUG=http2xconnect=0: got\n%s", s)
	}
}

func TestSelfSignedCert(t *testing.T) {
	cert, fp, err := selfSignedCert("127.0.0.1", "::1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	for _, name := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("the certificate verifies for example.com")
	}
	if len(fp) != 44 {
		t.Errorf("SPKI fingerprint %q: want 44 base64 characters", fp)
	}
}

// testServer is the example's server on a loopback port.
type testServer struct {
	*server
	addr string
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	cert, _, err := selfSignedCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(cert, log.New(testWriter{t}, "h2: ", 0))
	served := make(chan error, 1)
	go func() { served <- s.serve(ln) }()
	t.Cleanup(func() {
		s.closeAll(1000, "test over", 5*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.http.Shutdown(ctx)
		s.http.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return &testServer{server: s, addr: ln.Addr().String()}
}

// testWriter sends the server's log to the test's, until the test ends.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { recover() }() // a log line after the test ended
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// h2Conn opens one TLS connection with ALPN h2 and returns Go's HTTP/2
// client on it. http.Transport refuses the :protocol pseudo-header of an
// extended CONNECT; the HTTP/2 transport it hands TLS connections to
// (TLSNextProto["h2"]) takes it.
func h2Conn(t *testing.T, addr string) http.RoundTripper {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	tr.CloseIdleConnections() // sets TLSNextProto up
	next := tr.TLSNextProto["h2"]
	if next == nil {
		t.Fatal("the transport speaks no HTTP/2")
	}
	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	rt := next(addr, tc)
	t.Cleanup(func() { tc.Close() })
	return rt
}

// wsClient is a minimal RFC 6455 client over any byte stream: masked
// frames out, frames in, one permessage-deflate message inflated at a time
// (the server keeps its context, so each test socket reads at most one
// compressed message).
type wsClient struct {
	t   *testing.T
	w   io.Writer
	r   *bufio.Reader
	end func()
}

// dialH2 opens a WebSocket as an extended CONNECT stream (RFC 8441).
func dialH2(t *testing.T, rt http.RoundTripper, addr string, extensions string) (*wsClient, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodConnect, "https://"+addr+"/ws", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	if extensions != "" {
		req.Header.Set("Sec-WebSocket-Extensions", extensions)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("extended CONNECT: %s %s", resp.Proto, resp.Status)
	}
	c := &wsClient{t: t, w: pw, r: bufio.NewReader(resp.Body), end: func() { pw.Close(); cancel(); resp.Body.Close() }}
	t.Cleanup(c.end)
	return c, resp
}

// dialH1 opens a WebSocket with an HTTP/1.1 Upgrade on a TLS connection of
// its own.
func dialH1(t *testing.T, addr string) *wsClient {
	t.Helper()
	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr)
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols ||
		resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("upgrade: %s %v", resp.Status, resp.Header)
	}
	return &wsClient{t: t, w: tc, r: br, end: func() { tc.Close() }}
}

func (c *wsClient) send(op byte, p []byte) {
	c.t.Helper()
	b := []byte{0x80 | op}
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var key [4]byte
	rand.Read(key[:])
	b = append(b, key[:]...)
	for i, x := range p {
		b = append(b, x^key[i&3])
	}
	if _, err := c.w.Write(b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// read returns the next message (no fragments are expected from gust's
// echo of a single frame; a compressed one is inflated).
func (c *wsClient) read() (op byte, p []byte) {
	c.t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if h[0]&0x80 == 0 || h[1]&0x80 != 0 {
		c.t.Fatalf("unexpected frame header % x", h)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(c.r, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(c.r, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	p = make([]byte, n)
	if _, err := io.ReadFull(c.r, p); err != nil {
		c.t.Fatalf("read payload: %v", err)
	}
	if h[0]&0x40 != 0 { // RSV1: permessage-deflate
		fr := flate.NewReader(io.MultiReader(bytes.NewReader(p), bytes.NewReader([]byte{0, 0, 0xff, 0xff})))
		out, err := io.ReadAll(fr)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			c.t.Fatalf("inflate: %v", err)
		}
		p = out
	}
	return h[0] & 0x0f, p
}

func (c *wsClient) echo(op byte, p []byte) {
	c.t.Helper()
	c.send(op, p)
	gotOp, got := c.read()
	if gotOp != op || !bytes.Equal(got, p) {
		c.t.Fatalf("echo of op %d (%d bytes): got op %d (%d bytes)", op, len(p), gotOp, len(got))
	}
}

func (c *wsClient) close(code uint16) {
	c.t.Helper()
	c.send(0x8, binary.BigEndian.AppendUint16(nil, code))
	op, p := c.read()
	if op != 0x8 || len(p) < 2 || binary.BigEndian.Uint16(p) != code {
		c.t.Fatalf("close: got op %d % x, want close %d echoed", op, p, code)
	}
}

func waitStats(t *testing.T, s *server, ok func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never reached the expected state: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWebSocketsShareOneHTTP2Connection(t *testing.T) {
	s := startServer(t)
	rt := h2Conn(t, s.addr)
	const n = 4
	big := bytes.Repeat([]byte("gust over HTTP/2. "), (1<<20)/18+1)[:1<<20]
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		c, resp := dialH2(t, rt, s.addr, "permessage-deflate")
		if ext := resp.Header.Get("Sec-WebSocket-Extensions"); !strings.HasPrefix(ext, "permessage-deflate") {
			t.Fatalf("WebSocket %d: Sec-WebSocket-Extensions %q", i, ext)
		}
		wg.Add(1)
		go func() { // the streams run at once, as a page's WebSockets do
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs <- fmt.Sprint(r)
				}
			}()
			c.echo(0x1, []byte("hello #"+strconv.Itoa(i)))
			c.echo(0x2, []byte{0, 1, 2, 3, byte(i)})
			c.echo(0x2, big)
			c.close([]uint16{1000, 4000}[i%2])
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	st := waitStats(t, s.server, func(st Stats) bool { return st.WebSockets == n && st.WebSocketsOpen == 0 })
	if st.WebSocketsHTTP2 != n || st.WebSocketsHTTP1 != 0 || st.Compressed != n {
		t.Errorf("stats %+v: want %d WebSockets over HTTP/2, all compressed", st, n)
	}
	if st.TCPAccepted != 1 || st.TCPWithRequests != 1 || st.TCPWithWebSockets != 1 {
		t.Errorf("stats %+v: want one TCP connection for all", st)
	}
	if st.Messages != 3*n || st.Closes["1000"] != n/2 || st.Closes["4000"] != n/2 {
		t.Errorf("stats %+v: want %d messages, %d closes with 1000 and with 4000", st, 3*n, n/2)
	}
	if !st.ExtendedConnect {
		t.Error("extended_connect false under GODEBUG=http2xconnect=1")
	}
}

func TestWebSocketOverHTTP1(t *testing.T) {
	s := startServer(t)
	for i := range 2 {
		c := dialH1(t, s.addr)
		c.echo(0x1, []byte("hello over HTTP/1.1"))
		c.close(uint16(1000 + 3000*i))
	}
	st := waitStats(t, s.server, func(st Stats) bool { return st.WebSockets == 2 && st.WebSocketsOpen == 0 })
	if st.WebSocketsHTTP1 != 2 || st.WebSocketsHTTP2 != 0 || st.TCPAccepted != 2 || st.TCPWithWebSockets != 2 {
		t.Errorf("stats %+v: want 2 WebSockets over HTTP/1.1 on 2 TCP connections", st)
	}
}

func TestPageAndStats(t *testing.T) {
	s := startServer(t)
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true,
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + s.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("new WebSocket(")) ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET /: %s %s %q, %d bytes", resp.Proto, resp.Status, resp.Header.Get("Content-Type"), len(body))
	}
	resp, err = client.Get("https://" + s.addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.TCPAccepted != 1 || st.TCPWithRequests != 1 || st.WebSockets != 0 || !st.ExtendedConnect {
		t.Errorf("/stats: %+v", st)
	}
	resp, err = client.Get("https://" + s.addr + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing: %s", resp.Status)
	}
}

// TestCloseAll is the example's shutdown: every open WebSocket gets a
// close frame.
func TestCloseAll(t *testing.T) {
	s := startServer(t)
	c, _ := dialH2(t, h2Conn(t, s.addr), s.addr, "")
	c.echo(0x1, []byte("hi"))
	done := make(chan struct{})
	go func() {
		s.closeAll(4001, "bye", 5*time.Second)
		close(done)
	}()
	op, p := c.read()
	if op != 0x8 || binary.BigEndian.Uint16(p) != 4001 {
		t.Fatalf("got op %d % x, want close 4001", op, p)
	}
	c.send(0x8, p[:2])
	<-done
	st := waitStats(t, s.server, func(st Stats) bool { return st.WebSocketsOpen == 0 })
	if st.Closes["4001"] != 1 {
		t.Errorf("closes %v, want one 4001", st.Closes)
	}
}
