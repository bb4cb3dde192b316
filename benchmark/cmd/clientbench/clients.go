package main

// The three clients (and a variant of gust's), each used the way its documentation shows: gust with Dial, ReadLoop in a
// goroutine and an Event handler whose OnMessage gets every message; gorilla with
// Dialer.Dial, WriteMessage and ReadMessage; coder with Dial, Write and Read. Compression is
// off for all three (gorilla's and gust's default; coder is told CompressionDisabled), and
// every other option is left at the library's default, except coder's 32 KiB read limit, which
// the 234 KiB payload needs raised.
//
// gust-async is gust with Conn.WriteAsync instead of WriteMessage: writes queued in the
// connection's outbox and written by a writer goroutine, each batch of queued messages in one
// system call; at most 256 messages (the default OutboxSize) are queued or being written, a
// done callback frees a place.
//
// Each received data message is checked the same way in every client: type and length of each,
// every byte of the first and the last of a run.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	coder "github.com/coder/websocket"
	gorilla "github.com/gorilla/websocket"
	"github.com/gustws/gust"
)

// wsClient is one connection to the server, through one library.
type wsClient interface {
	// write sends one message: op 1 is text, 2 binary.
	write(op byte, p []byte) error
	// readText waits for the server's next message (an answer to a command) and returns it
	// with the time the library delivered it.
	readText() (string, time.Time, error)
	// expect arms the check of the next n data messages; call it before sending "in N".
	expect(n int, op byte, want []byte)
	// wait waits for the n messages announced to expect and returns the times the library
	// delivered the first and the last one.
	wait() (first, last time.Time, err error)
	// close ends the connection with a closing handshake.
	close() error
}

var clientNames = []string{"gust", "gorilla", "coder", "gust-async"}

// defaultClients are the ones a run takes unless told otherwise.
var defaultClients = []string{"gust", "gorilla", "coder"}

func dial(name, url string) (wsClient, error) {
	switch name {
	case "gust":
		return dialGust(url, false)
	case "gust-async":
		return dialGust(url, true)
	case "gorilla":
		return dialGorilla(url)
	case "coder":
		return dialCoder(url)
	}
	return nil, fmt.Errorf("unknown client %q (have %s)", name, strings.Join(clientNames, ", "))
}

// expectation is the run of data messages a client waits for.
type expectation struct {
	n, got int
	op     byte
	want   []byte
	err    error
	first  time.Time // when the first message was delivered
}

// check counts one received message and checks it; it reports whether the run is over.
func (e *expectation) check(op byte, p []byte) bool {
	e.got++
	switch {
	case op != e.op:
		e.err = fmt.Errorf("message %d of %d: opcode %d, want %d", e.got, e.n, op, e.op)
	case len(p) != len(e.want):
		e.err = fmt.Errorf("message %d of %d: %d bytes, want %d (%.60q)", e.got, e.n, len(p), len(e.want), p)
	case (e.got == 1 || e.got == e.n) && !bytes.Equal(p, e.want):
		e.err = fmt.Errorf("message %d of %d: content differs from the payload", e.got, e.n)
	}
	return e.err != nil || e.got == e.n
}

// ---- gust ----

type gustClient struct {
	gust.BuiltinEventHandler
	c *gust.Conn

	// async: write with WriteAsync, at most asyncWindow messages queued or being written
	async   bool
	sem     chan struct{}
	release func(error)

	exp     atomic.Pointer[gustExpectation] // set while a run of data messages is expected
	pending *gustExpectation                // the last one armed, for wait (client's goroutine)
	ctrl    chan textMsg                    // other messages: answers to commands
	closed  chan struct{}                   // closed after OnClose
	err     error                           // OnClose's error, set before closed is closed
}

type gustExpectation struct {
	expectation
	end  time.Time
	done chan struct{}
}

// asyncWindow is gust's default Options.OutboxSize: WriteAsync never finds the outbox full.
const asyncWindow = 256

type textMsg struct {
	s string
	t time.Time
}

func dialGust(url string, async bool) (wsClient, error) {
	g := &gustClient{ctrl: make(chan textMsg, 4), closed: make(chan struct{}), async: async}
	if async {
		g.sem = make(chan struct{}, asyncWindow)
		g.release = func(error) { <-g.sem } // a write error ends the connection: OnClose reports it
	}
	c, _, err := gust.Dial(context.Background(), url, g, nil)
	if err != nil {
		return nil, err
	}
	g.c = c
	go c.ReadLoop()
	return g, nil
}

func (g *gustClient) OnMessage(_ *gust.Conn, m *gust.Message) {
	if e := g.exp.Load(); e != nil {
		over := e.check(byte(m.Opcode), m.Data)
		if e.got == 1 {
			e.first = time.Now()
		}
		if over {
			e.end = time.Now()
			g.exp.Store(nil)
			close(e.done)
		}
		m.Close()
		return
	}
	g.ctrl <- textMsg{string(m.Data), time.Now()}
	m.Close()
}

func (g *gustClient) OnClose(_ *gust.Conn, err error) {
	g.err = err
	close(g.closed)
}

func (g *gustClient) write(op byte, p []byte) error {
	if !g.async {
		return g.c.WriteMessage(gust.Opcode(op), p)
	}
	select {
	case g.sem <- struct{}{}:
	case <-g.closed:
		return fmt.Errorf("connection closed: %v", g.err)
	}
	if err := g.c.WriteAsync(gust.Opcode(op), p, g.release); err != nil {
		<-g.sem
		return err
	}
	return nil
}

func (g *gustClient) readText() (string, time.Time, error) {
	select {
	case m := <-g.ctrl:
		return m.s, m.t, nil
	case <-g.closed:
		return "", time.Time{}, fmt.Errorf("connection closed: %v", g.err)
	}
}

func (g *gustClient) expect(n int, op byte, want []byte) {
	g.pending = &gustExpectation{expectation: expectation{n: n, op: op, want: want}, done: make(chan struct{})}
	g.exp.Store(g.pending)
}

func (g *gustClient) wait() (time.Time, time.Time, error) {
	e := g.pending
	g.pending = nil
	if e == nil {
		return time.Time{}, time.Time{}, errors.New("wait without expect")
	}
	select {
	case <-e.done:
		return e.first, e.end, e.err
	case <-g.closed:
		return time.Time{}, time.Time{}, fmt.Errorf("connection closed before %d messages: %v", e.n, g.err)
	}
}

func (g *gustClient) close() error {
	if err := g.c.Close(gust.StatusNormalClosure, ""); err != nil {
		return err
	}
	select {
	case <-g.closed:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("gust: no OnClose 5 s after Close")
	}
}

// ---- gorilla ----

type gorillaClient struct {
	c   *gorilla.Conn
	exp expectation
}

func dialGorilla(url string) (wsClient, error) {
	c, _, err := gorilla.DefaultDialer.Dial(url, http.Header{})
	if err != nil {
		return nil, err
	}
	return &gorillaClient{c: c}, nil
}

func (g *gorillaClient) write(op byte, p []byte) error { return g.c.WriteMessage(int(op), p) }

func (g *gorillaClient) readText() (string, time.Time, error) {
	_, p, err := g.c.ReadMessage()
	return string(p), time.Now(), err
}

func (g *gorillaClient) expect(n int, op byte, want []byte) {
	g.exp = expectation{n: n, op: op, want: want}
}

func (g *gorillaClient) wait() (time.Time, time.Time, error) {
	for {
		typ, p, err := g.c.ReadMessage()
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		over := g.exp.check(byte(typ), p)
		if g.exp.got == 1 {
			g.exp.first = time.Now()
		}
		if over {
			return g.exp.first, time.Now(), g.exp.err
		}
	}
}

func (g *gorillaClient) close() error {
	msg := gorilla.FormatCloseMessage(gorilla.CloseNormalClosure, "")
	if err := g.c.WriteControl(gorilla.CloseMessage, msg, time.Now().Add(5*time.Second)); err != nil {
		g.c.Close()
		return err
	}
	g.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := g.c.ReadMessage(); err != nil {
			g.c.Close()
			if gorilla.IsCloseError(err, gorilla.CloseNormalClosure) {
				return nil
			}
			return err
		}
	}
}

// ---- coder ----

type coderClient struct {
	c   *coder.Conn
	exp expectation
}

func dialCoder(url string) (wsClient, error) {
	c, _, err := coder.Dial(context.Background(), url, &coder.DialOptions{CompressionMode: coder.CompressionDisabled})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(maxPayload)
	return &coderClient{c: c}, nil
}

func (k *coderClient) write(op byte, p []byte) error {
	return k.c.Write(context.Background(), coder.MessageType(op), p)
}

func (k *coderClient) readText() (string, time.Time, error) {
	_, p, err := k.c.Read(context.Background())
	return string(p), time.Now(), err
}

func (k *coderClient) expect(n int, op byte, want []byte) {
	k.exp = expectation{n: n, op: op, want: want}
}

func (k *coderClient) wait() (time.Time, time.Time, error) {
	for {
		typ, p, err := k.c.Read(context.Background())
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		over := k.exp.check(byte(typ), p)
		if k.exp.got == 1 {
			k.exp.first = time.Now()
		}
		if over {
			return k.exp.first, time.Now(), k.exp.err
		}
	}
}

func (k *coderClient) close() error { return k.c.Close(coder.StatusNormalClosure, "") }
