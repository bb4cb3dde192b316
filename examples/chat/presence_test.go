package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// lateSnapshot is a Presence in which a member joins while a watch starts,
// and the member list the welcome is made of was read before that join:
// the race of an event and the snapshot it should follow, made to happen
// every time.
type lateSnapshot struct {
	*hub.LocalPresence
}

func (p lateSnapshot) Watch(topic string, f func(hub.PresenceEvent)) (func(), error) {
	stop, err := p.LocalPresence.Watch(topic, f)
	if err == nil && topic == "lobby" {
		done := make(chan struct{})
		go func() { // from another goroutine, as the Presence's own deliveries
			f(hub.PresenceEvent{Topic: topic, Member: "zed", Joined: true})
			close(done)
		}()
		<-done
	}
	return stop, err
}

func (p lateSnapshot) Members(dst []string, topic string) []string {
	return p.LocalPresence.Members(dst, topic) // zed not among them: read "before" the join
}

// The welcome reaches the page before any event the Presence reported
// after the watch began, in both modes: the page applies the event to the
// snapshot, never the snapshot over the event.
func TestChatWelcomeBeforeEvents(t *testing.T) {
	for _, netpoll := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "netpoll"}[netpoll], func(t *testing.T) {
			h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(nil)})
			require.NoError(t, err)
			ch := newChat(h, lateSnapshot{hub.NewLocalPresence()}, netpoll)
			defer ch.close()
			srv := ch.server(10 * time.Second)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			go srv.Serve(ln)
			defer ch.shutdown(srv, 10*time.Second)

			m := &member{events: make(chan event, 16)}
			c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws?room=lobby&name=alice", m, nil)
			require.NoError(t, err)
			go c.ReadLoop()
			defer c.Close(gust.StatusNormalClosure, "")
			var first []event
			for len(first) < 2 {
				select {
				case e := <-m.events:
					first = append(first, e)
				case <-time.After(10 * time.Second):
					t.Fatalf("got %v, want a welcome and zed's join", first)
				}
			}
			require.Equal(t, "welcome", first[0].Type, "%+v", first)
			require.Equal(t, []string{"alice"}, first[0].Members)
			require.Equal(t, "join", first[1].Type)
			require.Equal(t, "zed", first[1].Name)
		})
	}
}
