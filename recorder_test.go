package gust

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is the tests' Event handler. It records what happens on its
// connections: each Conn as it opens, a copy of each message, each OnClose
// error, on channels the test reads with the wait methods (each bounded by
// a timeout). A test sets the callbacks it needs before the first
// connection; a test whose handler behaves in a way of its own (one that
// panics, or writes in a pattern) embeds a *recorder and overrides one
// method.
type recorder struct {
	BuiltinEventHandler

	open    func(c *Conn)             // run on open, before the Conn is recorded
	message func(c *Conn, m *Message) // takes over every message: none is recorded
	pong    func(c *Conn, p []byte)   // run on each pong
	echo    bool                      // write each message back instead of recording it

	opens    atomic.Int32
	opened   chan *Conn // nil: Conns are not kept
	messages chan recordedMessage
	closed   chan error
}

// recordedMessage is a copy of a message a recorder received.
type recordedMessage struct {
	op   Opcode
	data []byte
}

// recorderRoom is how many events of each kind a recorder keeps unread
// before its callbacks block.
const recorderRoom = 100

func newRecorder() *recorder {
	return &recorder{
		opened:   make(chan *Conn, recorderRoom),
		messages: make(chan recordedMessage, recorderRoom),
		closed:   make(chan error, recorderRoom),
	}
}

// newEcho is a recorder that echoes every message.
func newEcho() *recorder {
	h := newRecorder()
	h.echo = true
	return h
}

func (h *recorder) OnOpen(c *Conn) {
	h.opens.Add(1)
	if h.open != nil {
		h.open(c)
	}
	if h.opened != nil {
		h.opened <- c
	}
}

func (h *recorder) OnMessage(c *Conn, m *Message) {
	switch {
	case h.message != nil:
		h.message(c, m)
		return
	case h.echo:
		c.WriteMessage(m.Opcode, m.Data)
	default:
		h.messages <- recordedMessage{m.Opcode, bytes.Clone(m.Data)}
	}
	m.Close()
}

func (h *recorder) OnPong(c *Conn, p []byte) {
	if h.pong != nil {
		h.pong(c, p)
	}
}

// OnClose records err last, so that a test that has seen it has seen the
// rest of the connection's events.
func (h *recorder) OnClose(_ *Conn, err error) { h.closed <- err }

// waitOpen returns the next Conn that opened, or fails the test.
func (h *recorder) waitOpen(t *testing.T) *Conn {
	t.Helper()
	select {
	case c := <-h.opened:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("OnOpen was not called")
		return nil
	}
}

// waitMessage returns the next message received, or fails the test when
// none comes or the connection ends first.
func (h *recorder) waitMessage(t *testing.T) recordedMessage {
	t.Helper()
	select {
	case m := <-h.messages:
		return m
	case err := <-h.closed:
		// OnMessage returns before OnClose is called: a message that
		// arrived is recorded by now.
		select {
		case m := <-h.messages:
			h.closed <- err
			return m
		default:
		}
		t.Fatalf("the connection ended while waiting for a message: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("OnMessage was not called")
	}
	return recordedMessage{}
}

// expectMessage waits for the next message and checks it.
func (h *recorder) expectMessage(t *testing.T, op Opcode, want []byte) {
	t.Helper()
	m := h.waitMessage(t)
	require.Equal(t, op, m.op)
	require.Equal(t, len(want), len(m.data))
	require.True(t, bytes.Equal(want, m.data), "message content differs")
}

// waitClose returns the next error OnClose was called with, or fails the
// test.
func (h *recorder) waitClose(t *testing.T) error {
	t.Helper()
	select {
	case err := <-h.closed:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("OnClose was not called")
		return nil
	}
}
