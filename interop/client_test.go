package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust"
)

// The gust client's side of the matrix: gust dials a Python websockets or
// Node ws server (testdata/server.py, server.js), through Dial and through
// Dial over a connection the caller opened (NetDialContext), with compression offered.

func TestGustClientPython(t *testing.T) {
	p := requirePeer(t, "python", dirGustClient)
	testGustClient(t, p, nil, pythonBin, filepath.Join(repoRoot, "interop", "testdata", "server.py"))
}

func TestGustClientNode(t *testing.T) {
	p := requirePeer(t, "node", dirGustClient)
	testGustClient(t, p, []string{"NODE_PATH=" + nodeModule}, "node",
		filepath.Join(repoRoot, "interop", "testdata", "server.js"))
}

// peerServer is a running server script and what it printed.
type peerServer struct {
	proc   *proc
	port   int
	mu     sync.Mutex
	cond   *sync.Cond
	closed map[string]peerClosed
	lines  []string
	eof    bool
}

// peerClosed is the line a server script prints when a connection ends.
type peerClosed struct {
	Label      string `json:"closed"`
	Code       *int   `json:"code"`
	Reason     string `json:"reason"`
	Extensions string `json:"extensions"`
}

func startPeerServer(t *testing.T, env []string, name string, args ...string) *peerServer {
	t.Helper()
	pr := startProc(t, 3*time.Minute, env, name, append(args, "0", "170")...)
	ps := &peerServer{proc: pr, closed: make(map[string]peerClosed)}
	ps.cond = sync.NewCond(&ps.mu)
	listening := make(chan int, 1)
	go func() {
		for l := range pr.lines {
			var hello struct {
				Listening int `json:"listening"`
			}
			var pc peerClosed
			switch {
			case json.Unmarshal([]byte(l), &hello) == nil && hello.Listening != 0:
				listening <- hello.Listening
			case strings.Contains(l, `"closed"`) && json.Unmarshal([]byte(l), &pc) == nil:
				ps.mu.Lock()
				ps.closed[pc.Label] = pc
				ps.mu.Unlock()
			}
			ps.mu.Lock()
			ps.lines = append(ps.lines, l)
			ps.cond.Broadcast()
			ps.mu.Unlock()
		}
		ps.mu.Lock()
		ps.eof = true
		ps.cond.Broadcast()
		ps.mu.Unlock()
	}()
	select {
	case ps.port = <-listening:
	case <-pr.exited:
		t.Fatalf("%s exited before listening: %v; stderr:\n%s", filepath.Base(args[0]), pr.err, pr.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not print its port within 30s; stderr:\n%s", filepath.Base(args[0]), pr.stderr.String())
	}
	return ps
}

// waitClosed returns what the server script printed when the connection
// labelled label ended.
func (ps *peerServer) waitClosed(label string, timeout time.Duration) (peerClosed, error) {
	timer := time.AfterFunc(timeout, func() {
		ps.mu.Lock()
		ps.cond.Broadcast()
		ps.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for {
		if pc, ok := ps.closed[label]; ok {
			return pc, nil
		}
		if ps.eof || time.Now().After(deadline) {
			return peerClosed{}, fmt.Errorf("the peer server printed no close for %q (stderr: %s)", label,
				ps.proc.stderr.String())
		}
		ps.cond.Wait()
	}
}

// clientPath is one way to open a gust client connection.
type clientPath struct {
	name string
	dial func(ctx context.Context, url, addr string, h gust.Event, opts *gust.DialOptions) (*gust.Conn, *http.Response, error)
}

var clientPaths = []clientPath{
	{name: "Dial", dial: func(ctx context.Context, url, _ string, h gust.Event, opts *gust.DialOptions) (*gust.Conn, *http.Response, error) {
		return gust.Dial(ctx, url, h, opts)
	}},
	{name: "DialOverAConnection", dial: func(ctx context.Context, url, addr string, h gust.Event, opts *gust.DialOptions) (*gust.Conn, *http.Response, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, nil, err
		}
		o := *opts
		o.NetDialContext = func(context.Context, string, string) (net.Conn, error) { return nc, nil }
		return gust.Dial(ctx, url, h, &o)
	}},
}

// clientConn is a gust client connection with its events on channels.
type clientConn struct {
	gust.BuiltinEventHandler
	c      *gust.Conn
	resp   *http.Response
	msgs   chan wantMessage
	closed chan error
}

func (cc *clientConn) OnMessage(_ *gust.Conn, m *gust.Message) {
	cc.msgs <- wantMessage{m.Opcode, bytes.Clone(m.Data)}
	m.Close()
}

func (cc *clientConn) OnClose(_ *gust.Conn, err error) { cc.closed <- err }

func (cc *clientConn) next(timeout time.Duration) (wantMessage, error) {
	select {
	case m := <-cc.msgs:
		return m, nil
	case err := <-cc.closed:
		cc.closed <- err
		return wantMessage{}, fmt.Errorf("connection ended while waiting for a message: %v", err)
	case <-time.After(timeout):
		return wantMessage{}, fmt.Errorf("no message within %v", timeout)
	}
}

func (cc *clientConn) waitClose(timeout time.Duration) (error, bool) {
	select {
	case err := <-cc.closed:
		cc.closed <- err
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

func (cc *clientConn) echo(want wantMessage) error {
	if err := cc.c.WriteMessage(want.op, want.data); err != nil {
		return fmt.Errorf("write %s: %w", describe(want), err)
	}
	return cc.expect(want)
}

func (cc *clientConn) expect(want wantMessage) error {
	got, err := cc.next(30 * time.Second)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", describe(want), err)
	}
	if got.op != want.op || !bytes.Equal(got.data, want.data) {
		return fmt.Errorf("got %s, want %s", describe(got), describe(want))
	}
	return nil
}

func expectCloseError(err error, code gust.StatusCode, reason string) error {
	var ce *gust.CloseError
	if !errors.As(err, &ce) {
		return fmt.Errorf("gust's OnClose got %T %v, want a *gust.CloseError with %d", err, err, code)
	}
	if ce.Code != code || (reason != "" && ce.Reason != reason) {
		return fmt.Errorf("gust's OnClose got close %d %q, want %d %q", ce.Code, ce.Reason, code, reason)
	}
	return nil
}

// A clientCase is one feature of the client direction: run drives gust's
// client; peerCode is the close code the peer server must report (0: the
// normal close gust sends after run, 1000).
type clientCase struct {
	name, title  string
	run          func(t *testing.T, cc *clientConn) error
	closesItself bool
	peerCode     int
}

func clientClose(code gust.StatusCode) func(*testing.T, *clientConn) error {
	return func(t *testing.T, cc *clientConn) error {
		if err := cc.echo(textMsg(payloadText)); err != nil {
			return err
		}
		if err := cc.c.Close(code, "client-bye"); err != nil {
			return fmt.Errorf("Close(%d): %w", code, err)
		}
		err, ok := cc.waitClose(10 * time.Second)
		if !ok {
			return errors.New("no OnClose within 10s of Close")
		}
		// The peer answers with its own close frame, echoing the code.
		return expectCloseError(err, code, "")
	}
}

var clientCases = []clientCase{
	{name: "text", title: "text", run: func(t *testing.T, cc *clientConn) error {
		return cc.echo(textMsg(payloadText))
	}},
	{name: "binary", title: "binary", run: func(t *testing.T, cc *clientConn) error {
		return cc.echo(binMsg(payloadBinary))
	}},
	{name: "fragmented", title: "fragmented", run: func(t *testing.T, cc *clientConn) error {
		// gust has no API to send fragments: the server sends one message in
		// three frames and gust must deliver it whole.
		if err := cc.c.WriteString("send-fragmented"); err != nil {
			return err
		}
		return cc.expect(textMsg(payloadFragmented))
	}},
	{name: "large", title: "1 MiB", run: func(t *testing.T, cc *clientConn) error {
		return cc.echo(binMsg(payloadLarge))
	}},
	{name: "compression", title: "deflate", run: func(t *testing.T, cc *clientConn) error {
		ext := cc.resp.Header.Get("Sec-WebSocket-Extensions")
		if !strings.Contains(ext, "permessage-deflate") {
			return fmt.Errorf("permessage-deflate not negotiated: response Sec-WebSocket-Extensions %q", ext)
		}
		if !cc.c.Compressed() {
			return errors.New("Conn.Compressed is false though the response accepted permessage-deflate")
		}
		if err := cc.c.WriteString("info"); err != nil {
			return err
		}
		m, err := cc.next(30 * time.Second)
		if err != nil {
			return err
		}
		var info struct {
			Extensions string `json:"extensions"`
		}
		if err := json.Unmarshal(m.data, &info); err != nil || !strings.Contains(info.Extensions, "permessage-deflate") {
			return fmt.Errorf("the peer server reports extensions %q (%v)", m.data, err)
		}
		if err := cc.echo(textMsg(payloadCompressible)); err != nil {
			return err
		}
		in, out, ok := tcpBytes(cc.c.NetConn())
		if err := checkWire(true, ok, in, out); err != nil {
			return err
		}
		t.Logf("negotiated %q (server says %q); %s", ext, info.Extensions, wireNote(ok, in, out))
		return nil
	}},
	{name: "close-1000", title: "close 1000", run: clientClose(1000), closesItself: true, peerCode: 1000},
	{name: "close-4001", title: "close 4001", run: clientClose(4001), closesItself: true, peerCode: 4001},
	{name: "server-close-4002", title: "server close 4002", closesItself: true, peerCode: 4002,
		run: func(t *testing.T, cc *clientConn) error {
			if err := cc.c.WriteString("close:4002"); err != nil {
				return err
			}
			err, ok := cc.waitClose(10 * time.Second)
			if !ok {
				return errors.New("no OnClose within 10s of asking the server to close")
			}
			return expectCloseError(err, 4002, "server-bye")
		}},
}

func testGustClient(t *testing.T, p *peer, env []string, name string, args ...string) {
	ps := startPeerServer(t, env, name, args...)
	addr := "127.0.0.1:" + strconv.Itoa(ps.port)
	url := "ws://" + addr + "/"
	for _, path := range clientPaths {
		t.Run(path.name, func(t *testing.T) {
			row := matrixRow{peer: p.name + " " + p.version, direction: dirGustClient, path: path.name}
			for _, cs := range clientCases {
				t.Run(cs.name, func(t *testing.T) {
					mark(t, row, cs.title)
					runClientCase(t, ps, path, url, addr, path.name+"/"+cs.name, cs)
				})
			}
		})
	}
}

func runClientCase(t *testing.T, ps *peerServer, path clientPath, url, addr, label string, cs clientCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := &clientConn{msgs: make(chan wantMessage, 16), closed: make(chan error, 1)}
	opts := &gust.DialOptions{Options: gust.Options{Compression: gust.CompressionOptions{Enabled: true}}}
	c, resp, err := path.dial(ctx, url, addr, cc, opts)
	if err != nil {
		t.Fatalf("gust %s %s: %v", path.name, url, err)
	}
	cc.c, cc.resp = c, resp
	loopDone := runReadLoop(t, c)

	if err := cc.echo(textMsg("label:" + label)); err != nil {
		t.Fatalf("label: %v", err)
	}
	if err := cs.run(t, cc); err != nil {
		t.Errorf("gust client: %v", err)
	}
	if !cs.closesItself {
		if err := c.Close(gust.StatusNormalClosure, "done"); err != nil {
			t.Errorf("Close(1000): %v", err)
		}
		err, ok := cc.waitClose(10 * time.Second)
		if !ok {
			t.Errorf("no OnClose within 10s of Close(1000)")
		} else if err := expectCloseError(err, 1000, ""); err != nil {
			t.Error(err)
		}
	}
	select {
	case <-loopDone:
	case <-time.After(10 * time.Second):
		t.Errorf("gust's ReadLoop did not return within 10s of OnClose")
	}

	want := cs.peerCode
	if want == 0 {
		want = 1000
	}
	pc, err := ps.waitClosed(label, 10*time.Second)
	switch {
	case err != nil:
		t.Error(err)
	case pc.Code == nil:
		t.Errorf("the peer server saw no close frame from gust, want %d", want)
	case *pc.Code != want:
		t.Errorf("the peer server saw close code %d %q, want %d", *pc.Code, pc.Reason, want)
	case !strings.Contains(pc.Extensions, "permessage-deflate"):
		t.Errorf("the peer server did not negotiate permessage-deflate with gust (extensions %q)", pc.Extensions)
	default:
		t.Logf("peer server: closed with %d %q, extensions %q", *pc.Code, pc.Reason, pc.Extensions)
	}
}

// runReadLoop runs c's ReadLoop on a goroutine, whose end the channel
// tells; when the test ends it closes c's connection and checks that
// ReadLoop returned.
func runReadLoop(t *testing.T, c *gust.Conn) <-chan struct{} {
	loopDone := make(chan struct{})
	go func() {
		c.ReadLoop()
		close(loopDone)
	}()
	t.Cleanup(func() {
		c.NetConn().Close()
		select {
		case <-loopDone:
		case <-time.After(10 * time.Second):
			t.Errorf("gust's ReadLoop still running 10s after the case")
		}
	})
	return loopDone
}
