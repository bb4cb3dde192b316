package gust_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust"
)

// echo sends every message back to its sender.
type echo struct {
	gust.BuiltinEventHandler // answers pings, ignores the rest
}

func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data)
	m.Close() // gives the message's buffer back
}

// inbox is a client's handler: it hands the messages it receives, and the
// reason the connection ended, to the code that dialed.
type inbox struct {
	gust.BuiltinEventHandler
	messages chan string
	closed   chan error
}

func newInbox() *inbox { return &inbox{messages: make(chan string, 8), closed: make(chan error, 1)} }

func (in *inbox) OnMessage(_ *gust.Conn, m *gust.Message) {
	in.messages <- string(m.Data)
	m.Close()
}

func (in *inbox) OnClose(_ *gust.Conn, err error) { in.closed <- err }

// dial connects a client that reports to in, and runs its read loop.
func dial(url string, in *inbox) *gust.Conn {
	c, _, err := gust.Dial(context.Background(), url, in, nil)
	if err != nil {
		log.Fatal(err)
	}
	go c.ReadLoop()
	return c
}

func ExampleUpgrader() {
	u := &gust.Upgrader{Handler: echo{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered with an HTTP error
		}
		c.ReadLoop() // returns when the connection ends
	})
	// A real server: (&http.Server{Addr: ":8080", Handler: mux,
	// ReadHeaderTimeout: 10 * time.Second}).ListenAndServe(); without
	// ReadHeaderTimeout a client that sends its head slowly is never dropped.
	srv := httptest.NewServer(mux)
	defer srv.Close()

	in := newInbox()
	client := dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", in)
	client.WriteString("hello")
	fmt.Println(<-in.messages)
	client.Close(gust.StatusNormalClosure, "")
	fmt.Println("closed:", gust.CloseStatus(<-in.closed)) // the server's answer
	// Output:
	// hello
	// closed: NormalClosure
}

func ExampleServer() {
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: echo{},
		Options: gust.Options{MaxMessageSize: 1 << 20},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // or srv.ListenAndServe(":8080")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	in := newInbox()
	client := dial("ws://"+ln.Addr().String(), in)
	client.WriteString("hello, gust")
	fmt.Println(<-in.messages)

	// Shutdown sends every connection a close frame with 1001 (going away)
	// and waits until they have all ended, or until ctx is done.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("Shutdown:", srv.Shutdown(ctx))
	fmt.Println("client closed:", gust.CloseStatus(<-in.closed))
	fmt.Println("Serve:", <-served)
	// Output:
	// hello, gust
	// Shutdown: <nil>
	// client closed: GoingAway
	// Serve: gust: server closed
}

func ExampleUpgrader_Shutdown() {
	u := &gust.Upgrader{Handler: echo{}}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := u.Upgrade(w, r)
			if err != nil {
				return // Upgrade has answered: 503 once Shutdown has started
			}
			c.ReadLoop()
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // or srv.ListenAndServe()
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)

	in := newInbox()
	client := dial("ws://"+ln.Addr().String(), in)
	client.WriteString("hello")
	fmt.Println(<-in.messages)

	// On SIGTERM: the http.Server's Shutdown stops accepting and ends idle
	// HTTP connections, but not the hijacked WebSockets; the Upgrader's
	// sends each of them 1001 (going away) and waits until they have ended,
	// or until ctx is done.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("http.Server:", srv.Shutdown(ctx))
	fmt.Println("Upgrader:", u.Shutdown(ctx))
	fmt.Println("client closed:", gust.CloseStatus(<-in.closed))
	// Output:
	// hello
	// http.Server: <nil>
	// Upgrader: <nil>
	// client closed: GoingAway
}

// greeter greets each new connection without waiting for the write: OnOpen
// returns at once, and the read loop starts, even if the peer is slow to read.
type greeter struct {
	gust.BuiltinEventHandler
	written chan error
}

func (g greeter) OnOpen(c *gust.Conn) {
	err := c.WriteAsync(gust.OpText, []byte("welcome"), func(err error) {
		g.written <- err // called from the writing goroutine once the frame is sent
	})
	if errors.Is(err, gust.ErrQueueFull) {
		c.Close(4008, "too slow") // the peer reads slower than we write
	}
}

func ExampleConn_WriteAsync() {
	g := greeter{written: make(chan error, 1)}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: g}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	client := dial(url, in)
	fmt.Println(<-in.messages)
	fmt.Println("write result:", <-g.written)
	client.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output:
	// welcome
	// write result: <nil>
}

// sessions tells apart, in OnClose, why each connection ended.
type sessions struct {
	gust.BuiltinEventHandler
	ended chan struct{}
}

func (s sessions) OnClose(c *gust.Conn, err error) {
	defer close(s.ended)
	switch code := gust.CloseStatus(err); code {
	case 0: // no close frame: the connection broke, timed out, or broke the protocol
		fmt.Println("connection lost:", err)
	case 4000:
		fmt.Println("user logged out")
	default:
		fmt.Println("closed with", code)
	}
}

func ExampleCloseStatus() {
	s := sessions{ended: make(chan struct{})}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: s}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	client := dial(url, in)
	client.Close(4000, "logout")
	<-s.ended
	fmt.Println("the server answered with", gust.CloseStatus(<-in.closed))
	// Output:
	// user logged out
	// the server answered with StatusCode(4000)
}

// ExampleDial connects gust's client to an echo server, with compression
// offered, and waits for the echo.
func ExampleDial() {
	upgrader := &gust.Upgrader{
		Handler: echo{},
		Options: gust.Options{Compression: gust.CompressionOptions{Enabled: true}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := upgrader.Upgrade(w, r); err == nil {
			c.ReadLoop()
		}
	}))
	defer srv.Close()

	in := newInbox()
	opts := &gust.DialOptions{Options: gust.Options{Compression: gust.CompressionOptions{Enabled: true}}}
	c, _, err := gust.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), in, opts)
	if err != nil {
		log.Fatal(err)
	}
	go c.ReadLoop()
	c.WriteString("hello")
	fmt.Println(<-in.messages, c.Compressed())
	c.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output: hello true
}

// serve runs a Server whose connections report to h on a loopback port, and
// returns its ws:// URL; stop closes it.
func serve(h gust.Event) (url string, stop func()) {
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h}}
	return listen(srv), func() { srv.Close() }
}

// listen serves srv on a loopback port and returns its ws:// URL.
func listen(srv *gust.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	return "ws://" + ln.Addr().String()
}

// moderator closes a connection with the code that fits what the client said.
type moderator struct{ gust.BuiltinEventHandler }

func (moderator) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	switch string(m.Data) {
	case "deploying":
		c.Close(gust.StatusGoingAway, "restarting") // 1001
	case "spam":
		c.Close(gust.StatusPolicyViolation, "too many messages") // 1008
	case "logout":
		c.Close(4001, "logged out") // 3000–4999 are the application's
	}
}

func ExampleConn_Close() {
	url, stop := serve(moderator{})
	defer stop()

	for _, say := range []string{"deploying", "spam", "logout"} {
		in := newInbox()
		client := dial(url, in)
		client.WriteString(say)
		err := <-in.closed // the client's OnClose
		var ce *gust.CloseError
		if errors.As(err, &ce) {
			fmt.Printf("%d %v by peer=%v: %s\n", gust.CloseStatus(err), ce.Code, ce.ByPeer, ce.Reason)
		}
	}
	// Codes that may not be sent (1005, 1006, 1015, 1016–2999, 5000+) are refused.
	in := newInbox()
	client := dial(url, in)
	fmt.Println(client.Close(gust.StatusAbnormalClosure, ""))
	client.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output:
	// 1001 GoingAway by peer=true: restarting
	// 1008 PolicyViolation by peer=true: too many messages
	// 4001 StatusCode(4001) by peer=true: logged out
	// gust: close code not valid on the wire
}

// bouncer cuts the connection of a client that sends "flood", without a
// closing handshake, and reports how the connection ended.
type bouncer struct {
	gust.BuiltinEventHandler
	ended chan error
}

func (b bouncer) OnMessage(c *gust.Conn, m *gust.Message) {
	if string(m.Data) == "flood" {
		c.CloseNow()
	}
	m.Close()
}

func (b bouncer) OnClose(_ *gust.Conn, err error) { b.ended <- err }

func ExampleConn_CloseNow() {
	b := bouncer{ended: make(chan error, 1)}
	url, stop := serve(b)
	defer stop()

	in := newInbox()
	client := dial(url, in)
	client.WriteString("flood")
	fmt.Println("server:", errors.Is(<-b.ended, net.ErrClosed))
	// The client saw the TCP connection end, with no close frame (1006 in a
	// browser): its error is an I/O error, not a *CloseError.
	var ce *gust.CloseError
	fmt.Println("client got a close frame:", errors.As(<-in.closed, &ce))
	// Output:
	// server: true
	// client got a close frame: false
}

// room keeps its open connections, so that news can be sent to all of them.
type room struct {
	gust.BuiltinEventHandler
	mu     sync.Mutex
	conns  map[*gust.Conn]bool
	joined chan struct{}
}

func (r *room) OnOpen(c *gust.Conn) {
	r.mu.Lock()
	r.conns[c] = true
	r.mu.Unlock()
	r.joined <- struct{}{}
}

func (r *room) OnClose(c *gust.Conn, _ error) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// broadcast frames p once and writes that frame to every connection.
func (r *room) broadcast(p []byte) error {
	pm, err := gust.NewPreparedMessage(gust.OpText, p)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.WritePrepared(pm) // an error here ends that connection, and reaches its OnClose
	}
	return nil
}

func ExamplePreparedMessage() {
	r := &room{conns: make(map[*gust.Conn]bool), joined: make(chan struct{}, 3)}
	url, stop := serve(r)
	defer stop()

	inboxes := []*inbox{newInbox(), newInbox(), newInbox()}
	for _, in := range inboxes {
		dial(url, in)
		<-r.joined
	}
	if err := r.broadcast([]byte("the game starts")); err != nil {
		log.Fatal(err)
	}
	for i, in := range inboxes {
		fmt.Printf("client %d: %s\n", i, <-in.messages)
	}
	// Output:
	// client 0: the game starts
	// client 1: the game starts
	// client 2: the game starts
}

func ExampleHandshakeError() {
	upgrader := &gust.Upgrader{Handler: echo{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			http.Error(w, "no token", http.StatusForbidden) // refuse before upgrading
			return
		}
		if c, err := upgrader.Upgrade(w, r); err == nil {
			c.ReadLoop()
		}
	}))
	defer srv.Close()

	_, _, err := gust.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil, nil)
	var he *gust.HandshakeError
	if errors.As(err, &he) { // every Dial error is one
		fmt.Println(he.Status, strings.TrimSpace(string(he.Body)))
	}
	// Output: 403 no token
}

// welcome greets the user that OnRequest attached to the connection.
type welcome struct{ gust.BuiltinEventHandler }

func (welcome) OnOpen(c *gust.Conn) {
	user, _ := c.Get("user")
	c.WriteString(fmt.Sprintf("welcome, %s (%s)", user, c.Subprotocol()))
}

// users maps session cookies to users.
var users = map[string]string{"s3cret": "ada"}

// checkSession is an OnRequest: it refuses a request without a known
// session cookie with 401 and a header and body of its own, and attaches
// the user to the connection otherwise.
func checkSession(r *http.Request, h http.Header, c *gust.Conn) error {
	ck, err := r.Cookie("session")
	if err != nil || users[ck.Value] == "" {
		return &gust.HandshakeError{
			Status: http.StatusUnauthorized,
			Header: http.Header{"WWW-Authenticate": {`Bearer realm="chat"`}},
			Body:   []byte("log in first\n"),
		}
	}
	c.Set("user", users[ck.Value]) // for OnOpen and every later callback
	h.Set("Cache-Control", "no-store")
	if r.URL.Query().Get("v") == "2" {
		h.Set("Sec-WebSocket-Protocol", "chat.v2") // this request's subprotocol
	}
	return nil
}

func ExampleUpgrader_onRequest() {
	upgrader := &gust.Upgrader{
		Handler:      welcome{},
		Subprotocols: []string{"chat.v1"},
		OnRequest:    checkSession,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "seen", Value: "1"}) // reaches the 101 too
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade answered: with the 401 checkSession chose
		}
		c.ReadLoop()
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/chat"

	_, _, err := gust.Dial(context.Background(), url, nil, nil)
	var he *gust.HandshakeError
	if errors.As(err, &he) {
		fmt.Println(he.Status, he.Header.Get("WWW-Authenticate"), strings.TrimSpace(string(he.Body)))
	}

	in := newInbox()
	opts := &gust.DialOptions{
		Header:       http.Header{"Cookie": {"session=s3cret"}},
		Subprotocols: []string{"chat.v1", "chat.v2"},
	}
	c, resp, err := gust.Dial(context.Background(), url+"?v=2", in, opts)
	if err != nil {
		log.Fatal(err)
	}
	go c.ReadLoop()
	fmt.Println(<-in.messages, resp.Header.Get("Cache-Control"), resp.Cookies()[0].Name)
	c.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output:
	// 401 Bearer realm="chat" log in first
	// welcome, ada (chat.v2) no-store seen
}

func ExampleServer_onRequest() {
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler:      welcome{},
		Subprotocols: []string{"chat.v1"},
		OnRequest:    checkSession, // the same callback as behind net/http
	}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	opts := &gust.DialOptions{Header: http.Header{"Cookie": {"session=s3cret"}}, Subprotocols: []string{"chat.v1"}}
	c, _, err := gust.Dial(context.Background(), url+"/chat", in, opts)
	if err != nil {
		log.Fatal(err)
	}
	go c.ReadLoop()
	fmt.Println(<-in.messages)
	c.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output: welcome, ada (chat.v1)
}

// greeterByName answers each message with the name stored on its connection.
type greeterByName struct{ gust.BuiltinEventHandler }

func (greeterByName) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	name, _ := c.Get("name")
	c.WriteString(fmt.Sprintf("%s said %s", name, m.Data))
}

func ExampleConn_Set() {
	upgrader := &gust.Upgrader{Handler: greeterByName{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return
		}
		c.Set("name", r.URL.Query().Get("name")) // before ReadLoop: every callback sees it
		c.ReadLoop()
	}))
	defer srv.Close()

	in := newInbox()
	client := dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/?name=ana", in)
	client.WriteString("hello")
	fmt.Println(<-in.messages)
	client.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output: ana said hello
}

// order is a request a client sends as JSON.
type order struct {
	Item  string `json:"item"`
	Count int    `json:"count"`
}

// shop answers each order, decoded with DecodeJSON, with a JSON receipt.
type shop struct{ gust.BuiltinEventHandler }

func (shop) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	var o order
	if err := m.DecodeJSON(&o); err != nil {
		c.Close(gust.StatusUnsupportedData, "bad JSON")
		return
	}
	c.WriteJSON(map[string]any{"ok": true, "total": o.Count * 3})
}

func ExampleConn_WriteJSON() {
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: shop{}}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	client := dial(url, in)
	if err := client.WriteJSON(order{Item: "tea", Count: 2}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-in.messages)
	// A value encoding/json cannot encode is refused, and nothing is sent.
	fmt.Println(client.WriteJSON(make(chan int)))
	// Output:
	// {"ok":true,"total":6}
	// json: unsupported type: chan int
}

func ExampleConn_Ping() {
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: echo{}}} // echo's OnPing answers
	url := listen(srv)
	defer srv.Close()

	client := dial(url, newInbox())
	// Ping waits for the pong, which the read goroutine reads: call it from
	// another goroutine than the callbacks, with a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rtt, err := client.Ping(ctx)
	fmt.Println("err:", err)
	fmt.Println("rtt > 0:", rtt > 0)
	// Output:
	// err: <nil>
	// rtt > 0: true
}

// deaf is a client that never answers pings, and sends nothing: a peer
// that vanished without closing its TCP connection looks the same.
type deaf struct{ gust.BuiltinEventHandler }

func (deaf) OnPing(*gust.Conn, []byte) {}

// watcher reports why each connection ended.
type watcher struct {
	gust.BuiltinEventHandler
	ended chan error
}

func (w watcher) OnClose(_ *gust.Conn, err error) { w.ended <- err }

func ExampleOptions_heartbeat() {
	w := watcher{ended: make(chan error, 2)}
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: w,
		Options: gust.Options{
			PingInterval: 100 * time.Millisecond, // ping a connection silent for this long
			PingTimeout:  100 * time.Millisecond, // cut it if still silent this long after the ping
		},
	}}
	url := listen(srv)
	defer srv.Close()

	// A client that answers pings (BuiltinEventHandler does) stays.
	alive := dial(url, newInbox())
	// One that does not is cut, within about 200 ms.
	silent, _, err := gust.Dial(context.Background(), url, deaf{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	go silent.ReadLoop()

	err = <-w.ended
	fmt.Println("silent peer cut:", errors.Is(err, os.ErrDeadlineExceeded))
	fmt.Println(strings.Contains(err.Error(), "no frame from the peer"))
	select {
	case err := <-w.ended:
		fmt.Println("the other ended too:", err)
	case <-time.After(500 * time.Millisecond):
		fmt.Println("the answering peer is still connected")
	}
	alive.Close(gust.StatusNormalClosure, "")
	<-w.ended
	// Output:
	// silent peer cut: true
	// true
	// the answering peer is still connected
}

// closeLog is a Metrics that prints how each connection ended and counts the
// bytes received. A real one updates counters (see the package
// github.com/gustws/gust/metrics): its methods must be quick and safe for
// concurrent use.
type closeLog struct {
	received atomic.Int64
	ended    chan string
}

func (l *closeLog) Handshake(status int) { fmt.Println("handshake:", status) }
func (l *closeLog) Opened(*gust.Conn)    {}
func (l *closeLog) Closed(_ *gust.Conn, code gust.StatusCode, cause string) {
	l.ended <- fmt.Sprintf("closed: %d %s, %d bytes received", code, cause, l.received.Load())
}
func (l *closeLog) Received(_ *gust.Conn, _ gust.Opcode, payload, _ int) {
	l.received.Add(int64(payload))
}
func (l *closeLog) Sent(*gust.Conn, gust.Opcode, int, int) {}
func (l *closeLog) Queued(*gust.Conn, int)                 {}
func (l *closeLog) Dropped(*gust.Conn, int)                {}

func ExampleMetrics() {
	m := &closeLog{ended: make(chan string, 1)}
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: echo{},
		Options: gust.Options{Metrics: m}, // every connection of srv reports to m
	}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	client := dial(url, in)
	client.WriteString("hello")
	<-in.messages
	client.Close(gust.StatusNormalClosure, "")
	fmt.Println(<-m.ended)
	// Output:
	// handshake: 101
	// closed: 1000 peer, 5 bytes received
}

// Options.Logger takes a *slog.Logger: a panic in a callback is one record
// whose details are attributes (here without the time, the peer's address
// and the stack, which change from run to run).
func ExampleOptions_logger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "remote", "stack":
				return slog.Attr{}
			}
			return a
		},
	}))
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: panicky{},
		Options: gust.Options{Logger: logger},
	}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	client := dial(url, in)
	client.WriteString("hello")
	fmt.Println(gust.CloseStatus(<-in.closed))
	// Output:
	// level=ERROR msg="gust: panic in event handler" code=1011 panic="cannot handle hello"
	// InternalError
}

// panicky panics on every message.
type panicky struct{ gust.BuiltinEventHandler }

func (panicky) OnMessage(_ *gust.Conn, m *gust.Message) {
	panic("cannot handle " + string(m.Data))
}

// upload streams each large message it receives to a file, a frame at a
// time, and reports its size and SHA-256 to the sender.
type upload struct {
	gust.BuiltinEventHandler
	dir string
}

func (u upload) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	f, err := os.CreateTemp(u.dir, "upload-*")
	if err != nil {
		c.Close(gust.StatusInternalError, "")
		return
	}
	defer f.Close()
	d := sha256.New()
	// Read works for every message: a whole one reads its Data, a streamed
	// one (m.Streamed()) its frames as they arrive.
	n, err := io.Copy(io.MultiWriter(f, d), m)
	if err != nil {
		return // the peer broke a limit or left: OnClose says which
	}
	c.WriteString(fmt.Sprintf("%d bytes, streamed %v, sha256 %x", n, m.Streamed(), d.Sum(nil)[:4]))
}

func ExampleMessage_Read() {
	dir, err := os.MkdirTemp("", "uploads")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: upload{dir: dir},
		Options: gust.Options{
			StreamThreshold: 256 << 10, // past 256 KiB, a message is streamed
			MaxMessageSize:  1 << 30,   // which the limit still bounds
		},
	}}
	url := listen(srv)
	defer srv.Close()

	in := newInbox()
	client := dial(url, in)
	client.WriteString("small")
	fmt.Println(<-in.messages)
	client.WriteFrom(gust.OpBinary, io.LimitReader(zeros{}, 16<<20)) // 16 MiB, never held whole
	fmt.Println(<-in.messages)
	client.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output:
	// 5 bytes, streamed false, sha256 81db8ebb
	// 16777216 bytes, streamed true, sha256 080acf35
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func ExampleConn_NextWriter() {
	in := newInbox()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&gust.Upgrader{Handler: in}).Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
	}))
	defer srv.Close()
	out := newInbox()
	client := dial("ws"+strings.TrimPrefix(srv.URL, "http"), out)

	// One text message written as it is produced: each Write goes out in
	// fragments once it fills the write buffer; Close sends the last one.
	// Other writes on the connection wait until Close.
	w, err := client.NextWriter(gust.OpText)
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Print(<-in.messages)
	client.Close(gust.StatusNormalClosure, "")
	<-out.closed
	// Output:
	// line 0
	// line 1
	// line 2
}
