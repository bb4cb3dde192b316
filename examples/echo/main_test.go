package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

type closeRecorder struct {
	gust.BuiltinEventHandler
	messages chan string
	closed   chan error
}

func (r *closeRecorder) OnMessage(_ *gust.Conn, m *gust.Message) {
	r.messages <- string(m.Data)
	m.Close()
}

func (r *closeRecorder) OnClose(_ *gust.Conn, err error) { r.closed <- err }

// TestShutdownSendsGoingAway: when serve's context ends (SIGTERM in main),
// every client gets 1001 and serve returns nil.
func TestShutdownSendsGoingAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln, 10*time.Second) }()

	var clients []*closeRecorder
	for range 3 {
		r := &closeRecorder{messages: make(chan string, 1), closed: make(chan error, 1)}
		c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", r, nil)
		require.NoError(t, err)
		go c.ReadLoop()
		require.NoError(t, c.WriteString("hi"))
		require.Equal(t, "hi", <-r.messages)
		clients = append(clients, r)
	}
	stop()
	for _, r := range clients {
		select {
		case err := <-r.closed:
			require.Equal(t, gust.StatusGoingAway, gust.CloseStatus(err))
		case <-time.After(10 * time.Second):
			t.Fatal("a client was not closed")
		}
	}
	require.NoError(t, <-served)
}
