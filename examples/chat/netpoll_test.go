package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

// member is a test client that passes on the events it receives.
type member struct {
	gust.BuiltinEventHandler
	events chan event
}

func (m *member) OnMessage(_ *gust.Conn, msg *gust.Message) {
	defer msg.Close()
	var e struct { // an event, or a numbered Hub message with one as its data
		event
		Topic string `json:"topic"`
		Data  *event `json:"data"`
	}
	if json.Unmarshal(msg.Data, &e) != nil {
		return
	}
	switch {
	case e.Topic == "":
		m.events <- e.event
	case e.Data != nil:
		m.events <- *e.Data
	}
}

// next returns the next event of type typ, failing on a leave notice met
// on the way unless typ is "leave".
func (m *member) next(t *testing.T, typ string) event {
	t.Helper()
	for {
		select {
		case e := <-m.events:
			if e.Type == typ {
				return e
			}
			require.NotEqual(t, "leave", e.Type, "a leave notice for %s, who has not left", e.Name)
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q event", typ)
		}
	}
}

// TestChatHandlerReturnsInNetpollMode: with -netpoll the /ws handler
// returns while its member stays in the room (ReadLoop returns at once),
// so nothing may follow ReadLoop: the member still gets the room's
// messages, and leaves, with a notice to the others, only when its
// connection ends (OnClose). In goroutine mode the handler lives as long
// as the connection.
func TestChatHandlerReturnsInNetpollMode(t *testing.T) {
	for _, netpoll := range []bool{false, true} {
		name := "goroutine"
		if netpoll {
			name = "netpoll"
		}
		t.Run(name, func(t *testing.T) {
			if netpoll && runtime.GOOS != "linux" {
				t.Skip("netpoll mode is Linux only")
			}
			ch := newLocalChat(1000, netpoll)
			defer ch.close()
			srv := ch.server(10 * time.Second)
			returned := make(chan string, 2)
			inner := srv.Handler
			srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.ServeHTTP(w, r)
				if r.URL.Path == "/ws" {
					returned <- r.URL.Query().Get("name")
				}
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()

			join := func(name string) (*gust.Conn, *member) {
				m := &member{events: make(chan event, 16)}
				c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws?room=lobby&name="+name, m, nil)
				require.NoError(t, err)
				go c.ReadLoop()
				m.next(t, "welcome")
				return c, m
			}
			alice, am := join("alice")
			bob, bm := join("bob")
			am.next(t, "join") // bob's

			if netpoll {
				for range 2 {
					select {
					case <-returned:
					case <-time.After(10 * time.Second):
						t.Fatal("a /ws handler did not return in netpoll mode")
					}
				}
			}
			require.NoError(t, alice.WriteString(`{"text":"hi"}`))
			got := bm.next(t, "message")
			require.Equal(t, "alice", got.Name)
			require.Equal(t, "hi", got.Text)
			if !netpoll {
				require.Empty(t, returned, "a /ws handler returned while its connection lived")
			}

			require.NoError(t, bob.Close(gust.StatusNormalClosure, ""))
			left := am.next(t, "leave")
			require.Equal(t, "bob", left.Name)
			require.Equal(t, []string{"alice"}, ch.presence.Members(nil, "lobby"))

			require.NoError(t, ch.shutdown(srv, 10*time.Second))
			require.ErrorIs(t, <-served, http.ErrServerClosed)
		})
	}
}
