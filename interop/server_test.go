package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust"
)

// record is what gust's server saw on one connection.
type record struct {
	label      string
	compressed bool
	received   []wantMessage // after the label
	closeErr   error
	done       chan struct{} // closed after OnClose

	// wire: the TCP byte counts when the peer sent "stats" (after the
	// compression case's echo); wireOK when they could be read.
	stats           bool
	wireOK          bool
	wireIn, wireOut int64
}

// echoServer is the gust side of the server direction: it echoes every
// message with its type, except two commands: "label:NAME" names the
// connection (and is echoed), "close:CODE" makes gust close with CODE and
// the reason "server-bye" through Close.
type echoServer struct {
	gust.BuiltinEventHandler

	mu      sync.Mutex
	conns   map[*gust.Conn]*record
	labels  map[string]chan *record
	open    int
	allDone chan struct{} // signalled when open drops to 0
}

func newEchoServer() *echoServer {
	return &echoServer{
		conns:   make(map[*gust.Conn]*record),
		labels:  make(map[string]chan *record),
		allDone: make(chan struct{}, 1),
	}
}

func (s *echoServer) labelChan(label string) chan *record {
	ch, ok := s.labels[label]
	if !ok {
		ch = make(chan *record, 1)
		s.labels[label] = ch
	}
	return ch
}

func (s *echoServer) OnOpen(c *gust.Conn) {
	s.mu.Lock()
	s.conns[c] = &record{compressed: c.Compressed(), done: make(chan struct{})}
	s.open++
	s.mu.Unlock()
}

func (s *echoServer) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	s.mu.Lock()
	rec := s.conns[c]
	s.mu.Unlock()
	if m.Opcode == gust.OpText {
		msg := string(m.Data)
		if label, ok := strings.CutPrefix(msg, "label:"); ok && rec.label == "" {
			rec.label = label
			s.mu.Lock()
			s.labelChan(label) <- rec
			s.mu.Unlock()
			c.WriteMessage(m.Opcode, m.Data)
			return
		}
		if msg == "stats" {
			rec.stats = true
			rec.wireIn, rec.wireOut, rec.wireOK = tcpBytes(c.NetConn())
			c.WriteMessage(m.Opcode, m.Data)
			return
		}
		if code, ok := strings.CutPrefix(msg, "close:"); ok {
			n, _ := strconv.Atoi(code)
			if err := c.Close(gust.StatusCode(n), "server-bye"); err != nil {
				c.WriteString("Close failed: " + err.Error())
			}
			return
		}
	}
	rec.received = append(rec.received, wantMessage{m.Opcode, bytes.Clone(m.Data)})
	c.WriteMessage(m.Opcode, m.Data)
}

func (s *echoServer) OnClose(c *gust.Conn, err error) {
	s.mu.Lock()
	rec := s.conns[c]
	delete(s.conns, c)
	rec.closeErr = err
	s.open--
	if s.open == 0 {
		select {
		case s.allDone <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	close(rec.done)
}

// wait returns the record of the connection labelled label once it has
// ended, or an error after timeout.
func (s *echoServer) wait(label string, timeout time.Duration) (*record, error) {
	s.mu.Lock()
	ch := s.labelChan(label)
	s.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var rec *record
	select {
	case rec = <-ch:
		ch <- rec // others may wait for the same label
	case <-timer.C:
		return nil, fmt.Errorf("gust's server never saw a connection labelled %q", label)
	}
	select {
	case <-rec.done:
		return rec, nil
	case <-timer.C:
		return nil, fmt.Errorf("connection %q still open on gust's side after %v", label, timeout)
	}
}

// waitIdle waits until every connection gust's server accepted has ended.
func (s *echoServer) waitIdle(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		open := s.open
		s.mu.Unlock()
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d connection(s) still open on gust's side after %v", open, timeout)
		}
		select {
		case <-s.allDone:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check compares what gust's server saw on the connection of f with what
// the feature expects: compression negotiated, the messages, the close
// code.
func (f feature) check(rec *record) error {
	var errs []error
	if !rec.compressed {
		errs = append(errs, errors.New("permessage-deflate not negotiated on gust's side (Conn.Compressed is false)"))
	}
	if len(rec.received) != len(f.received) {
		errs = append(errs, fmt.Errorf("gust received %d message(s) after the label, want %d: %s",
			len(rec.received), len(f.received), describeAll(rec.received)))
	} else {
		for i, w := range f.received {
			g := rec.received[i]
			if g.op != w.op || !bytes.Equal(g.data, w.data) {
				errs = append(errs, fmt.Errorf("gust received message %d as %s, want %s", i, describe(g), describe(w)))
			}
		}
	}
	if f.name == "compression" {
		if err := checkWire(rec.stats, rec.wireOK, rec.wireIn, rec.wireOut); err != nil {
			errs = append(errs, err)
		}
	}
	if f.closeCode != 0 {
		var ce *gust.CloseError
		switch {
		case !errors.As(rec.closeErr, &ce):
			errs = append(errs, fmt.Errorf("gust's OnClose got %T %v, want a *gust.CloseError with %d",
				rec.closeErr, rec.closeErr, f.closeCode))
		case ce.Code != f.closeCode:
			errs = append(errs, fmt.Errorf("gust's OnClose got close code %d (%q), want %d", ce.Code, ce.Reason, f.closeCode))
		}
	}
	return errors.Join(errs...)
}

// checkWire makes sure the compression case's 256 KiB of text went over the
// wire compressed both ways: the bytes gust's side received and sent, the
// handshake included, are under a quarter of it.
func checkWire(asked, ok bool, in, out int64) error {
	limit := int64(len(payloadCompressible) / 4)
	switch {
	case !asked:
		return errors.New("the peer never sent \"stats\" after the compression echo")
	case !ok:
		return nil // no TCP_INFO here: the payload check stands alone
	case in > limit || out > limit:
		return fmt.Errorf("%d KiB of text went %d bytes in and %d bytes out on the wire: not compressed "+
			"(want both under %d)", len(payloadCompressible)>>10, in, out, limit)
	}
	return nil
}

func wireNote(ok bool, in, out int64) string {
	if !ok {
		return "wire bytes unknown (no TCP_INFO)"
	}
	return fmt.Sprintf("on the wire %d bytes in, %d out for %d KiB of text each way", in, out,
		len(payloadCompressible)>>10)
}

func describe(m wantMessage) string {
	if m.op == gust.OpText {
		if len(m.data) <= 64 {
			return fmt.Sprintf("text(%d) %q", len(m.data), m.data)
		}
		return fmt.Sprintf("text(%d)", len(m.data))
	}
	return fmt.Sprintf("%v(%d)", m.op, len(m.data))
}

func describeAll(ms []wantMessage) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, describe(m))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// serverPath is one way gust serves WebSockets.
type serverPath struct {
	name string
	// start serves h on a loopback listener and returns the ws:// URL. mux,
	// when not nil, gets extra HTTP handlers on the same origin (Upgrader
	// path) or on a separate loopback HTTP server (Server path), whose base
	// URL is returned as httpURL.
	start func(t *testing.T, h *echoServer, mux *http.ServeMux) (wsURL, httpURL string)
}

var serverPaths = []serverPath{
	{name: "Upgrader", start: startUpgrader},
	{name: "Server", start: startServer},
}

func serverOptions() gust.Options {
	return gust.Options{
		Compression:  gust.CompressionOptions{Enabled: true},
		CloseTimeout: 5 * time.Second,
	}
}

// loopbackOrigin accepts requests without an Origin and browsers on a
// loopback page (the Server path's page is on another port).
func loopbackOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	for _, p := range []string{"http://127.0.0.1:", "http://localhost:", "http://[::1]:"} {
		if strings.HasPrefix(origin, p) {
			return true
		}
	}
	return false
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	return ln
}

// startUpgrader serves gust through net/http: /ws upgrades with the default
// origin check (the browser's page comes from the same origin), the rest
// goes to mux.
func startUpgrader(t *testing.T, h *echoServer, mux *http.ServeMux) (string, string) {
	up := &gust.Upgrader{Handler: h, Options: serverOptions()}
	all := http.NewServeMux()
	all.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r)
		if err != nil {
			t.Logf("gust Upgrade refused %s: %v", r.RemoteAddr, err)
			return
		}
		c.ReadLoop()
	})
	if mux != nil {
		all.Handle("/", mux)
	}
	ln := listenLoopback(t)
	srv := &http.Server{Handler: all, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		if err := h.waitIdle(10 * time.Second); err != nil {
			t.Errorf("Upgrader path: %v", err)
		}
	})
	base := "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	return "ws://" + base + "/ws", "http://" + base
}

// startServer serves gust with its own accept loop and handshake parser;
// mux, if any, is served by a separate net/http server.
func startServer(t *testing.T, h *echoServer, mux *http.ServeMux) (string, string) {
	s := &gust.Server{Upgrader: gust.Upgrader{Handler: h, Options: serverOptions(), CheckOrigin: loopbackOrigin}}
	return runServer(t, s, h, mux)
}

// runServer serves h with s, over TLS (ServeTLS) when s has a TLSConfig,
// and mux as startServer does.
func runServer(t *testing.T, s *gust.Server, h *echoServer, mux *http.ServeMux) (string, string) {
	ln := listenLoopback(t)
	served := make(chan error, 1)
	scheme := "ws"
	if s.TLSConfig != nil {
		scheme = "wss"
		go func() { served <- s.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- s.Serve(ln) }()
	}
	t.Cleanup(func() {
		if err := h.waitIdle(10 * time.Second); err != nil {
			t.Errorf("Server path: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("gust Server.Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, gust.ErrServerClosed) {
			t.Errorf("gust Server.Serve returned %v, want ErrServerClosed", err)
		}
	})
	wsURL := scheme + "://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/ws"
	httpURL := ""
	if mux != nil {
		hln := listenLoopback(t)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(hln)
		t.Cleanup(func() { srv.Close() })
		httpURL = "http://127.0.0.1:" + strconv.Itoa(hln.Addr().(*net.TCPAddr).Port)
	}
	return wsURL, httpURL
}
