package main

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

type closeRecorder struct {
	gust.BuiltinEventHandler
	closed chan error
}

func (r *closeRecorder) OnClose(_ *gust.Conn, err error) { r.closed <- err }

// TestShutdownSendsGoingAway: the shutdown main runs on SIGTERM sends
// every member 1001 and returns once they have gone.
func TestShutdownSendsGoingAway(t *testing.T) {
	ch := newLocalChat(1000, false)
	defer ch.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := ch.server(10 * time.Second)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var members []*closeRecorder
	for _, q := range []string{"name=a&room=lobby", "name=b&room=lobby", "name=c&room=kitchen"} {
		r := &closeRecorder{closed: make(chan error, 1)}
		c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws?"+q, r, nil)
		require.NoError(t, err)
		go c.ReadLoop()
		members = append(members, r)
	}
	require.NoError(t, ch.shutdown(srv, 10*time.Second))
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	for _, r := range members {
		select {
		case err := <-r.closed:
			require.Equal(t, gust.StatusGoingAway, gust.CloseStatus(err))
		case <-time.After(10 * time.Second):
			t.Fatal("a member was not closed")
		}
	}
}
