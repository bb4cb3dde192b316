package hub_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// Two Hubs share a LocalBroker, each with two clients in "room": what a
// client says reaches the three others, on both Hubs, once each, and not
// the sender.
func TestHubPublishExcept(t *testing.T) {
	broker := hub.NewLocalBroker()
	var hubs []*hub.Hub
	var clients []*hubClient
	for range 2 {
		hb, err := hub.New(&hub.Options{Broker: broker})
		require.NoError(t, err)
		defer hb.Close()
		hubs = append(hubs, hb)
		s := startHubServer(t, serverConfig{hub: hb, wrap: true})
		for range 2 {
			c := dialHub(t, s.url, 0, false, true)
			c.send(t, "join:room")
			clients = append(clients, c)
		}
	}
	a0, a1, b0, b1 := clients[0], clients[1], clients[2], clients[3]
	a0.send(t, "say:room:from a0")
	b1.send(t, "say:room:from b1")
	b1.send(t, "say:elsewhere:nobody")
	// except nil is Publish; a connection of another topic excepts no one.
	require.NoError(t, hubs[0].PublishExcept("room", gust.OpText, []byte("to all"), nil))
	want := map[*hubClient][]string{
		a0: {"from b1", "to all"},
		a1: {"from a0", "from b1", "to all"},
		b0: {"from a0", "from b1", "to all"},
		b1: {"from a0", "to all"},
	}
	for i, c := range clients {
		waitFor(t, "the messages", 5*time.Second, func() bool { return int(c.count.Load()) >= len(want[c]) })
		time.Sleep(20 * time.Millisecond) // a duplicate, or the sender's own, would show now
		require.Equal(t, want[c], c.textsNow(), "client %d", i)
	}
	// Each Hub counts its own deliveries: 1+2+2 on the first, 2+1+2 on the second.
	for i, hb := range hubs {
		waitFor(t, "5 deliveries", 5*time.Second, func() bool { return hb.Stats().Delivered == 5 })
		require.Zero(t, hb.Stats().Pending, "hub %d", i)
	}

	require.NoError(t, hubs[1].Close())
	require.ErrorIs(t, hubs[1].PublishExcept("room", gust.OpText, []byte("x"), nil), hub.ErrClosed)
}

// AppendSubscribers and SubscriberCount list a topic's local connections,
// Topics a connection's topics; all are snapshots.
func TestHubSubscribersAndTopics(t *testing.T) {
	hb := new(hub.Hub)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	x := dialHub(t, s.url, 0, false, true)
	y := dialHub(t, s.url, 0, false, true)
	x.send(t, "join:a")
	x.send(t, "join:b")
	y.send(t, "join:b")
	x.send(t, "join:c")

	require.Zero(t, hb.SubscriberCount("nobody"))
	require.Empty(t, hb.AppendSubscribers(nil, "nobody"))
	require.Equal(t, 2, hb.SubscriberCount("b"))
	// The server's connection of a client is the one whose remote address is
	// the client's local address.
	serverConn := func(c *hubClient, in []*gust.Conn) *gust.Conn {
		i := slices.IndexFunc(in, func(sc *gust.Conn) bool {
			return sc.RemoteAddr().String() == c.conn.LocalAddr().String()
		})
		require.GreaterOrEqual(t, i, 0, "%v not among the subscribers", c.conn.LocalAddr())
		return in[i]
	}
	subs := hb.AppendSubscribers(nil, "b")
	require.Len(t, subs, 2)
	sx, sy := serverConn(x, subs), serverConn(y, subs)
	require.Equal(t, []*gust.Conn{sx}, hb.AppendSubscribers(nil, "a"))
	require.Equal(t, []*gust.Conn{sy, sx}, hb.AppendSubscribers([]*gust.Conn{sy}, "a"), "appended to dst")

	topics := hb.Topics(sx)
	require.Equal(t, []string{"a", "b", "c"}, topics)
	require.Equal(t, []string{"b"}, hb.Topics(sy))
	require.Nil(t, hb.Topics(x.conn), "a connection the Hub does not hold")

	// A reused buffer lists members without allocating.
	buf := make([]*gust.Conn, 0, 8)
	require.Zero(t, testing.AllocsPerRun(100, func() { buf = hb.AppendSubscribers(buf[:0], "b") }))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = hb.SubscriberCount("b") }))

	// Snapshots: later changes do not touch what was returned.
	x.send(t, "leave:b")
	require.Equal(t, []string{"a", "b", "c"}, topics)
	require.Len(t, subs, 2)
	require.Equal(t, []string{"a", "c"}, hb.Topics(sx))
	require.Equal(t, []*gust.Conn{sy}, hb.AppendSubscribers(nil, "b"))

	// A connection that closes leaves its topics (Wrap's OnClose).
	y.conn.Close(gust.StatusNormalClosure, "")
	<-y.closed
	y.closed <- nil // for the cleanup
	waitFor(t, "y to leave", 5*time.Second, func() bool { return hb.SubscriberCount("b") == 0 })
	require.Nil(t, hb.Topics(sy))
	require.Empty(t, hb.AppendSubscribers(nil, "b"))
}

// A chat room: each message a connection sends goes to the other members of
// its room, on this server and, through the Broker, on the others; the
// sender does not get it back. A new member learns how many are in the room
// (on this server).
func ExampleHub_PublishExcept() {
	hb, err := hub.New(&hub.Options{Broker: hub.NewLocalBroker()}) // cluster/nats across machines
	if err != nil {
		panic(err)
	}
	defer hb.Close()
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: hb.Wrap(chatHandler{hub: hb}),
		Options: gust.Options{OutboxPolicy: gust.OutboxCloseSlow},
	}}
	go srv.ListenAndServe("127.0.0.1:0")
	defer srv.Close()
	fmt.Println(hb.SubscriberCount("lobby"))
	// Output: 0
}

type chatHandler struct {
	gust.BuiltinEventHandler
	hub *hub.Hub
}

func (h chatHandler) OnOpen(c *gust.Conn) {
	h.hub.Subscribe(c, "lobby")
	c.WriteString(fmt.Sprintf("%d here", h.hub.SubscriberCount("lobby")))
}

func (h chatHandler) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	for _, room := range h.hub.Topics(c) {
		h.hub.PublishExcept(room, gust.OpText, m.Data, c)
	}
}
