package main

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// lateSnapshot is a Presence in which a member joins just after the
// member list a welcome is made of was read: the change is told to the
// room's watcher at once, from another goroutine, as the Presence's own
// deliveries are, and Members waits up to 100 ms for it to be told. A
// chat that let a change be told between its member's list and that
// member becoming a listener loses the change for that member; one that
// told it before the welcome was queued sends it first.
type lateSnapshot struct {
	*hub.LocalPresence
	mu    sync.Mutex
	watch func(hub.PresenceEvent) // lobby's watcher
}

func (p *lateSnapshot) Watch(topic string, f func(hub.PresenceEvent)) (func(), error) {
	if topic == "lobby" {
		p.mu.Lock()
		p.watch = f
		p.mu.Unlock()
	}
	return p.LocalPresence.Watch(topic, f)
}

func (p *lateSnapshot) Members(dst []string, topic string) []string {
	dst = p.LocalPresence.Members(dst, topic) // zed not among them: read "before" the join
	p.mu.Lock()
	f := p.watch
	p.mu.Unlock()
	if topic == "lobby" && f != nil {
		told := make(chan struct{})
		go func() {
			f(hub.PresenceEvent{Topic: topic, Member: "zed", Joined: true})
			close(told)
		}()
		select {
		case <-told: // a chat that does not order the two
		case <-time.After(100 * time.Millisecond): // one that does: the change waits for the welcome
		}
	}
	return dst
}

// serveChat serves ch on a loopback port until the test and its cleanups
// registered earlier are done, then shuts it down and closes it; it
// returns the address.
func serveChat(t *testing.T, ch *chat) string {
	t.Helper()
	srv := ch.server(10 * time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ch.shutdown(srv, 10*time.Second)
		ch.close()
	})
	return ln.Addr().String()
}

// The welcome reaches the page before a change told after its member list
// was read, and the change reaches it, in both modes: the page applies the
// event to the snapshot, never the snapshot over the event.
func TestChatWelcomeBeforeEvents(t *testing.T) {
	for _, netpoll := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "netpoll"}[netpoll], func(t *testing.T) {
			h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(nil)})
			require.NoError(t, err)
			addr := serveChat(t, newChat(h, &lateSnapshot{LocalPresence: hub.NewLocalPresence()}, netpoll))

			m := &member{events: make(chan event, 16)}
			c, _, err := gust.Dial(context.Background(), "ws://"+addr+"/ws?room=lobby&name=alice", m, nil)
			require.NoError(t, err)
			go c.ReadLoop()
			defer c.Close(gust.StatusNormalClosure, "")
			var got []event // until zed's join; alice's own join may come too
			for len(got) == 0 || got[len(got)-1].Name != "zed" {
				select {
				case e := <-m.events:
					got = append(got, e)
				case <-time.After(10 * time.Second):
					t.Fatalf("got %v, want a welcome and zed's join", got)
				}
			}
			require.Equal(t, "welcome", got[0].Type, "%+v", got)
			require.Equal(t, []string{"alice"}, got[0].Members)
			require.Equal(t, "join", got[len(got)-1].Type)
			for _, e := range got[1 : len(got)-1] {
				require.Equal(t, event{Type: "join", Room: "lobby", Name: "alice", Time: e.Time}, e, "only alice's own join besides")
			}
		})
	}
}

// slowWatch is a Presence whose first Watch of "slow" waits until released,
// as a cluster Presence's first Watch of a topic waits for the other
// instances' members.
type slowWatch struct {
	*hub.LocalPresence
	entered, release chan struct{}
}

func (p *slowWatch) Watch(topic string, f func(hub.PresenceEvent)) (func(), error) {
	if topic == "slow" {
		close(p.entered)
		<-p.release
	}
	return p.LocalPresence.Watch(topic, f)
}

// A room's first Watch that waits holds up that room's connections only: a
// member of another room is welcomed meanwhile.
func TestChatSlowWatchHoldsUpOneRoom(t *testing.T) {
	h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(nil)})
	require.NoError(t, err)
	p := &slowWatch{LocalPresence: hub.NewLocalPresence(), entered: make(chan struct{}), release: make(chan struct{})}
	addr := serveChat(t, newChat(h, p, false))
	release := sync.OnceFunc(func() { close(p.release) })
	defer release() // before the shutdown, which waits for ann's OnOpen

	join := func(room, name string) *member {
		m := &member{events: make(chan event, 16)}
		c, _, err := gust.Dial(context.Background(), "ws://"+addr+"/ws?room="+room+"&name="+name, m, nil)
		require.NoError(t, err)
		go c.ReadLoop()
		t.Cleanup(func() { c.Close(gust.StatusNormalClosure, "") })
		return m
	}
	welcome := func(m *member) event {
		t.Helper()
		select {
		case e := <-m.events:
			return e
		case <-time.After(5 * time.Second):
			t.Fatal("no welcome")
			return event{}
		}
	}
	ann := join("slow", "ann")
	<-p.entered
	bob := join("fast", "bob")
	require.Equal(t, "welcome", welcome(bob).Type, "bob waited for another room's Watch")
	release()
	require.Equal(t, "welcome", welcome(ann).Type)
}
