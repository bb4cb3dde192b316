package gust_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
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
	srv := httptest.NewServer(mux) // or http.ListenAndServe(":8080", mux)
	defer srv.Close()

	client := dialExample(srv.Listener.Addr().String(), "/ws")
	client.send(opText, []byte("hello"))
	fmt.Printf("%s\n", client.read(opText))
	client.close()
	// Output: hello
}

func ExampleServer() {
	srv := gust.NewServer(echo{}, &gust.Options{MaxMessageSize: 1 << 20})
	ln, err := net.Listen("tcp", "127.0.0.1:0") // or srv.ListenAndServe(":8080")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	client := dialExample(ln.Addr().String(), "/")
	client.send(opText, []byte("hello, gust"))
	fmt.Printf("%s\n", client.read(opText))

	// Shutdown sends every connection a close frame with 1001 (going away)
	// and waits until they have all ended, or until ctx is done.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()

	fmt.Println("client got", client.awaitClose())
	fmt.Println("Shutdown:", <-shut)
	fmt.Println("Serve:", <-served)
	// Output:
	// hello, gust
	// client got GoingAway
	// Shutdown: <nil>
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
	srv := gust.NewServer(g, &gust.Options{WriteQueueSize: 64})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	client := dialExample(ln.Addr().String(), "/")
	fmt.Printf("%s\n", client.read(opText))
	fmt.Println("write result:", <-g.written)
	client.close()
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

	client := dialExample(ln.Addr().String(), "/")
	client.send(opClose, append(binary.BigEndian.AppendUint16(nil, 4000), "logout"...))
	code := client.awaitClose()
	<-s.ended
	fmt.Println("the server answered with", code)
	// Output:
	// user logged out
	// the server answered with StatusCode(4000)
}

// exampleClient is a stand-in for a WebSocket client until gust has its
// own: just enough of RFC 6455 for the examples to run and check their
// output. It panics on any error.
type exampleClient struct {
	nc        net.Conn
	br        *bufio.Reader
	closeSent bool
}

const (
	opText  = 0x1
	opClose = 0x8
)

func dialExample(addr, path string) *exampleClient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		panic(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	var k [16]byte
	rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, addr, key)
	c := &exampleClient{nc: nc, br: bufio.NewReader(nc)}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		panic(err)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols ||
		resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		panic("handshake failed: " + resp.Status)
	}
	return c
}

// send writes one masked, final frame.
func (c *exampleClient) send(op byte, p []byte) {
	b := []byte{0x80 | op}
	switch {
	case len(p) <= 125:
		b = append(b, 0x80|byte(len(p)))
	case len(p) <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0x80|126), uint16(len(p)))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 0x80|127), uint64(len(p)))
	}
	var key [4]byte
	rand.Read(key[:])
	b = append(b, key[:]...)
	for i, x := range p {
		b = append(b, x^key[i&3])
	}
	if _, err := c.nc.Write(b); err != nil {
		panic(err)
	}
	c.closeSent = c.closeSent || op == opClose
}

// next reads one unfragmented frame.
func (c *exampleClient) next() (op byte, p []byte) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		panic(err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		io.ReadFull(c.br, e[:])
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		io.ReadFull(c.br, e[:])
		n = binary.BigEndian.Uint64(e[:])
	}
	p = make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		panic(err)
	}
	return h[0] & 0x0f, p
}

// read reads the next frame and checks its opcode.
func (c *exampleClient) read(op byte) []byte {
	got, p := c.next()
	if got != op {
		panic(fmt.Sprintf("got opcode %#x, want %#x", got, op))
	}
	return p
}

// awaitClose reads frames up to the server's close frame, answers it unless
// the client closed first, waits for the server to close the connection, and
// returns the close code.
func (c *exampleClient) awaitClose() gust.StatusCode {
	for {
		op, p := c.next()
		if op != opClose {
			continue
		}
		if !c.closeSent {
			c.send(opClose, p[:min(len(p), 2)])
		}
		code := gust.StatusNoStatusReceived
		if len(p) >= 2 {
			code = gust.StatusCode(binary.BigEndian.Uint16(p))
		}
		if _, err := c.br.ReadByte(); err != io.EOF {
			panic(fmt.Sprintf("want the server to close the connection, got %v", err))
		}
		c.nc.Close()
		return code
	}
}

// close starts the closing handshake with 1000 and waits for its end.
func (c *exampleClient) close() {
	c.send(opClose, binary.BigEndian.AppendUint16(nil, uint16(gust.StatusNormalClosure)))
	c.awaitClose()
}
