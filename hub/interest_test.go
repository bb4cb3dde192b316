package hub_test

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
	"github.com/gustws/gust/internal/testkit"
)

// interestBroker is a LocalBroker that records the interest calls of the
// Hubs subscribed to it. Add fails for topic "unroutable".
type interestBroker struct {
	hub.LocalBroker
	mu    sync.Mutex
	calls []string
}

func (b *interestBroker) SubscribeInterest(handler func(topic string, msg []byte)) (hub.Interest, error) {
	unsub, err := b.Subscribe(handler)
	return &recordedInterest{b: b, unsub: unsub}, err
}

func (b *interestBroker) record(call string) {
	b.mu.Lock()
	b.calls = append(b.calls, call)
	b.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (b *interestBroker) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls
	b.calls = nil
	return c
}

type recordedInterest struct {
	b     *interestBroker
	unsub func()
}

func (i *recordedInterest) Add(topic string) error {
	i.b.record("+" + topic)
	if topic == "unroutable" {
		return errors.New("no route")
	}
	return nil
}

func (i *recordedInterest) Remove(topic string) { i.b.record("-" + topic) }

func (i *recordedInterest) Unsubscribe() {
	i.b.record("unsubscribe")
	i.unsub()
}

// A Hub on an InterestBroker reports each topic's first subscriber and its
// last one leaving: by Unsubscribe, or when its connection closes (Wrap).
func TestHubInterest(t *testing.T) {
	b := new(interestBroker)
	var logged testkit.Buffer
	hb, err := hub.New(&hub.Options{Broker: b, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	require.NoError(t, err)
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	c1 := dialHub(t, s.url, 0, false, true)
	c2 := dialHub(t, s.url, 0, false, true)
	require.Empty(t, b.take(), "PublishAll needs no Add")

	c1.send(t, "join:a")
	require.Equal(t, []string{"+a"}, b.take())
	c2.send(t, "join:a")
	c2.send(t, "join:a")
	c2.send(t, "join:b")
	require.Equal(t, []string{"+b"}, b.take())
	c1.send(t, "leave:a")
	c1.send(t, "leave:never-joined")
	require.Empty(t, b.take())
	c2.send(t, "leave:a")
	require.Equal(t, []string{"-a"}, b.take())
	c1.send(t, "join:a")
	require.Equal(t, []string{"+a"}, b.take())

	// Topics are routed as before: the broker brings PublishAll and topic
	// messages from another Hub.
	other, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	require.NoError(t, other.Publish("b", gust.OpText, []byte("to b")))
	require.NoError(t, other.PublishAll(gust.OpText, []byte("to all")))
	waitFor(t, "c2's messages", 5*time.Second, func() bool { return c2.count.Load() == 2 })
	require.Equal(t, []string{"to b", "to all"}, c2.textsNow())
	require.NoError(t, other.Close())
	require.Equal(t, []string{"unsubscribe"}, b.take())

	// A topic the broker cannot route is logged, and still local.
	c1.send(t, "join:unroutable")
	require.Equal(t, []string{"+unroutable"}, b.take())
	require.Contains(t, logged.String(), `msg="gust: hub: the broker cannot route the topic to this Hub" topic=unroutable err="no route"`)
	require.NoError(t, hb.Publish("unroutable", gust.OpText, []byte("local")))
	waitFor(t, "the local message", 5*time.Second, func() bool { return c1.count.Load() == 2 })

	// A connection that closes ends the interest in its topics.
	c2.conn.Close(gust.StatusNormalClosure, "")
	<-c2.closed
	c2.closed <- nil
	waitFor(t, "c2 to leave b", 5*time.Second, func() bool { return slices.Contains(b.take(), "-b") })
	c1.conn.Close(gust.StatusNormalClosure, "")
	<-c1.closed
	c1.closed <- nil
	var calls []string
	waitFor(t, "c1 to leave", 5*time.Second, func() bool { calls = append(calls, b.take()...); return len(calls) == 2 })
	require.ElementsMatch(t, []string{"-a", "-unroutable"}, calls)

	require.NoError(t, hb.Close())
	require.Equal(t, []string{"unsubscribe"}, b.take())
	require.NoError(t, hb.Close())
	require.Empty(t, b.take())
}

// Without Wrap, a closed connection leaves when a message is next published
// to it, and with it the topic's interest; Hub.Remove ends it too.
func TestHubInterestWithoutWrap(t *testing.T) {
	b := new(interestBroker)
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, autoJoin: "news"})
	c1 := dialHub(t, s.url, 0, false, true)
	waitFor(t, "c1 to join", 5*time.Second, func() bool { return hb.Stats().Topics == 1 })
	require.Equal(t, []string{"+news"}, b.take())

	c1.conn.Close(gust.StatusNormalClosure, "")
	<-c1.closed
	c1.closed <- nil
	<-s.done
	require.Empty(t, b.take(), "nothing told the Hub yet")
	require.NoError(t, hb.Publish("news", gust.OpText, []byte("x")))
	waitFor(t, "the closed connection to go", 5*time.Second, func() bool { return hb.Stats().Connections == 0 })
	require.Equal(t, []string{"-news"}, b.take())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	oh := &openHandler{opened: make(chan *gust.Conn, 1)}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: oh}}
	go srv.Serve(ln)
	defer srv.Close()
	dialHub(t, "ws://"+ln.Addr().String()+"/", 0, false, true)
	c := <-oh.opened
	require.NoError(t, hb.Subscribe(c, "x"))
	require.NoError(t, hb.Subscribe(c, "y"))
	require.Equal(t, []string{"+x", "+y"}, b.take())
	hb.Remove(c)
	require.ElementsMatch(t, []string{"-x", "-y"}, b.take())
}
