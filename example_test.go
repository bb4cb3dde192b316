package gust_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
	u := gust.NewUpgrader(echo{}, nil)
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
	client.WriteClose(gust.StatusNormalClosure, "")
	fmt.Println("closed:", gust.CloseStatus(<-in.closed)) // the server's answer
	// Output:
	// hello
	// closed: NormalClosure
}

func ExampleServer() {
	srv := gust.NewServer(echo{}, &gust.Options{MaxMessageSize: 1 << 20})
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
		c.WriteClose(4008, "too slow") // the peer reads slower than we write
	}
}

func ExampleConn_WriteAsync() {
	g := greeter{written: make(chan error, 1)}
	srv := gust.NewServer(g, &gust.Options{OutboxSize: 64})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	in := newInbox()
	client := dial("ws://"+ln.Addr().String(), in)
	fmt.Println(<-in.messages)
	fmt.Println("write result:", <-g.written)
	client.WriteClose(gust.StatusNormalClosure, "")
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
		fmt.Println("peer closed with", code)
	}
}

func ExampleCloseStatus() {
	s := sessions{ended: make(chan struct{})}
	srv := gust.NewServer(s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	in := newInbox()
	client := dial("ws://"+ln.Addr().String(), in)
	client.WriteClose(4000, "logout")
	<-s.ended
	fmt.Println("the server answered with", gust.CloseStatus(<-in.closed))
	// Output:
	// user logged out
	// the server answered with StatusCode(4000)
}

// ExampleDial connects gust's client to an echo server, with compression
// offered, and waits for the echo.
func ExampleDial() {
	upgrader := gust.NewUpgrader(echo{}, &gust.Options{Compression: gust.CompressionOptions{Enabled: true}})
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
	c.WriteClose(gust.StatusNormalClosure, "")
	<-in.closed
	// Output: hello true
}
