package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

type closeRecorder struct {
	gust.BuiltinEventHandler
	closed chan error
	leaves atomic.Int32
}

func (r *closeRecorder) OnClose(_ *gust.Conn, err error) { r.closed <- err }

func (r *closeRecorder) OnMessage(_ *gust.Conn, m *gust.Message) {
	defer m.Close()
	var e event
	if json.Unmarshal(m.Data, &e) == nil && e.Type == "leave" {
		r.leaves.Add(1)
	}
}

// TestShutdownSendsGoingAway: the shutdown main runs on SIGTERM sends
// every member 1001 and returns once they have gone, telling nobody of the
// others leaving meanwhile (gust refuses writes from Shutdown's start; the
// chat does not even try, which benchmark/cmd/closebench measures).
func TestShutdownSendsGoingAway(t *testing.T) {
	ch := newLocalChat(1000, false)
	defer ch.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := ch.server(10 * time.Second)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var members []*closeRecorder
	queries := []string{"name=c&room=kitchen"}
	for i := range 20 {
		queries = append(queries, fmt.Sprintf("name=m%d&room=lobby", i))
	}
	for _, q := range queries {
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
		require.Zero(t, r.leaves.Load(), "a member was told of a leave during the shutdown")
	}
}
