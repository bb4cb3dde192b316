package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// memHistory is a HistoryBroker in memory: one sequence for all topics, as
// a NATS stream has, the last keep records of each topic, handlers called
// in the publisher's goroutine under a lock (one at a time, in order).
// Messages whose payload contains "lose" are stored but not delivered
// live, as if the Broker's connection had dropped them; those that contain
// "late" are stored, and delivered live only when release is called.
type memHistory struct {
	keep int
	gate chan struct{} // when not nil, History waits for it to close
	held []hub.Record  // the "late" ones, guarded by deliver

	deliver  sync.Mutex // held while handlers run: one at a time, in order
	mu       sync.Mutex
	seq      uint64
	records  map[string][]hub.Record
	handlers []func(hub.Record)
}

func newMemHistory(keep int) *memHistory {
	return &memHistory{keep: keep, records: make(map[string][]hub.Record)}
}

func (b *memHistory) Publish(topic string, msg []byte) error {
	b.deliver.Lock()
	defer b.deliver.Unlock()
	b.mu.Lock()
	b.seq++
	rs := b.records[topic]
	r := hub.Record{Topic: topic, Seq: b.seq, Msg: slices.Clone(msg)}
	if len(rs) > 0 {
		r.Prev = rs[len(rs)-1].Seq
	}
	rs = append(rs, r)
	if len(rs) > b.keep {
		rs = rs[len(rs)-b.keep:]
	}
	b.records[topic] = rs
	handlers := b.handlers
	b.mu.Unlock()
	switch {
	case bytes.Contains(msg, []byte(`"lose"`)):
	case bytes.Contains(msg, []byte(`"late"`)):
		b.held = append(b.held, r)
	default:
		for _, h := range handlers {
			h(r)
		}
	}
	return nil
}

// release delivers the "late" messages.
func (b *memHistory) release() {
	b.deliver.Lock()
	defer b.deliver.Unlock()
	b.mu.Lock()
	handlers := b.handlers
	b.mu.Unlock()
	for _, r := range b.held {
		for _, h := range handlers {
			h(r)
		}
	}
	b.held = nil
}

func (b *memHistory) Subscribe(func(string, []byte)) (func(), error) {
	panic("a Hub uses SubscribeHistory")
}

func (b *memHistory) SubscribeInterest(func(string, []byte)) (hub.Interest, error) {
	panic("a Hub uses SubscribeHistory")
}

func (b *memHistory) SubscribeHistory(handler func(hub.Record)) (hub.Interest, error) {
	b.mu.Lock()
	b.handlers = append(b.handlers, handler)
	b.mu.Unlock()
	return nopInterest{}, nil
}

func (b *memHistory) History(ctx context.Context, topic string, since uint64, f func(hub.Record) error) error {
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	rs := slices.Clone(b.records[topic])
	b.mu.Unlock()
	for _, r := range rs {
		if r.Seq >= since {
			if err := f(r); err != nil {
				return err
			}
		}
	}
	return nil
}

type nopInterest struct{}

func (nopInterest) Add(string) error { return nil }
func (nopInterest) Remove(string)    {}
func (nopInterest) Unsubscribe()     {}

// notice is FrameJSON's object, decoded.
type notice struct {
	Topic     string          `json:"topic"`
	Seq       uint64          `json:"seq"`
	Data      json.RawMessage `json:"data"`
	Gap       *uint64         `json:"gap"`
	Recovered *uint64         `json:"recovered"`
}

// says returns what a client received, one line each: "T#seq text",
// "T gap N", "T recovered N".
func says(t *testing.T, c *hubClient) []string {
	t.Helper()
	var out []string
	for _, s := range c.textsNow() {
		var n notice
		require.NoError(t, json.Unmarshal([]byte(s), &n), s)
		switch {
		case n.Gap != nil:
			out = append(out, fmt.Sprintf("%s gap %d", n.Topic, *n.Gap))
		case n.Recovered != nil:
			out = append(out, fmt.Sprintf("%s recovered %d", n.Topic, *n.Recovered))
		default:
			var v struct{ Text string }
			require.NoError(t, json.Unmarshal(n.Data, &v), s)
			out = append(out, fmt.Sprintf("%s#%d %s", n.Topic, n.Seq, v.Text))
		}
	}
	return out
}

func say(t *testing.T, h *hub.Hub, topic, text string) {
	t.Helper()
	require.NoError(t, h.Publish(topic, gust.OpText, fmt.Appendf(nil, `{"text":%q}`, text)))
}

func waitSays(t *testing.T, c *hubClient, want ...string) {
	t.Helper()
	waitFor(t, fmt.Sprint(want), 5*time.Second, func() bool { return int(c.count.Load()) >= len(want) })
	time.Sleep(20 * time.Millisecond) // a duplicate would show now
	require.Equal(t, want, says(t, c))
}

// With a HistoryBroker, two Hubs deliver a topic's messages, their own
// included, numbered in one order; PublishExcept leaves the sender out.
func TestHubHistoryNumbersMessages(t *testing.T) {
	b := newMemHistory(100)
	var clients []*hubClient
	var hubs []*hub.Hub
	for range 2 {
		hb, err := hub.New(&hub.Options{Broker: b})
		require.NoError(t, err)
		defer hb.Close()
		hubs = append(hubs, hb)
		s := startHubServer(t, serverConfig{hub: hb, wrap: true})
		c := dialHub(t, s.url, 0, false, true)
		c.send(t, "join:room")
		clients = append(clients, c)
	}
	say(t, hubs[0], "room", "one")
	say(t, hubs[1], "room", "two")
	say(t, hubs[1], "other", "elsewhere")
	clients[0].send(t, `say:room:{"text":"three"}`) // PublishExcept: not back to clients[0]
	waitSays(t, clients[0], "room#1 one", "room#2 two")
	waitSays(t, clients[1], "room#1 one", "room#2 two", "room#4 three")
	require.Equal(t, uint64(2+3), hubs[0].Stats().Delivered+hubs[1].Stats().Delivered)
}

// SubscribeSince sends what the history holds after the given sequence,
// then a recovered notice, then what comes live; all of it for 0; a gap
// first when the history no longer holds the sequence.
func TestHubSubscribeSince(t *testing.T) {
	b := newMemHistory(4)
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	for _, text := range []string{"a", "b", "c", "d", "e", "f"} { // 1..6; the history keeps 3..6
		say(t, hb, "room", text)
	}

	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:4")
	waitSays(t, c, "room#5 e", "room#6 f", "room recovered 6")
	say(t, hb, "room", "g")
	waitSays(t, c, "room#5 e", "room#6 f", "room recovered 6", "room#7 g")
	c.send(t, "since:room:1") // subscribed already: nothing more
	time.Sleep(20 * time.Millisecond)
	require.Len(t, says(t, c), 4)

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:0")
	waitSays(t, c, "room#4 d", "room#5 e", "room#6 f", "room#7 g", "room recovered 7")

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:2") // 2 is gone
	waitSays(t, c, "room gap 2", "room#4 d", "room#5 e", "room#6 f", "room#7 g", "room recovered 7")

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:empty:9") // nothing at all: a gap, as 9 may have been there
	waitSays(t, c, "empty gap 9", "empty recovered 9")

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:7") // up to date
	waitSays(t, c, "room recovered 7")

	plain, err := hub.New(nil)
	require.NoError(t, err)
	require.ErrorIs(t, plain.SubscribeSince(c.conn, "room", 1), hub.ErrNoHistory)
}

// Messages published while a connection recovers reach it after what the
// history gave it, each once, in order.
func TestHubSubscribeSinceMeetsLiveMessages(t *testing.T) {
	b := newMemHistory(100)
	b.gate = make(chan struct{})
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	say(t, hb, "room", "a")
	say(t, hb, "room", "b")

	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:1") // waits at the gate
	say(t, hb, "room", "c")   // stored (so in the history) and live
	say(t, hb, "room", "d")
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, says(t, c))
	close(b.gate)
	waitSays(t, c, "room#2 b", "room#3 c", "room#4 d", "room recovered 4")
	say(t, hb, "room", "e")
	waitSays(t, c, "room#2 b", "room#3 c", "room#4 d", "room recovered 4", "room#5 e")
}

// A message that the Broker stored but did not deliver is fetched from the
// history when the next one's Prev tells of it.
func TestHubRepairsWhatTheBrokerDropped(t *testing.T) {
	b := newMemHistory(100)
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "join:room")
	say(t, hb, "room", "a")
	say(t, hb, "room", "lose")
	say(t, hb, "other", "x")
	say(t, hb, "room", "lose")
	say(t, hb, "room", "d")
	waitSays(t, c, "room#1 a", "room#2 lose", "room#4 lose", "room#5 d")
}

// A message that a recovery sent is not sent again once the connection
// receives live messages: not when the Broker brings it after the history
// gave it (its delivery lagged behind the history read), nor when the Hub
// repairs it for the subscribers that missed it.
func TestHubSubscribeSinceSendsEachMessageOnce(t *testing.T) {
	b := newMemHistory(100)
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	old := dialHub(t, s.url, 0, false, true)
	old.send(t, "join:room")
	say(t, hb, "room", "a")
	say(t, hb, "room", "late") // stored; the Broker brings it later
	say(t, hb, "room", "lose") // stored, never brought: repaired with the next

	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:1")
	waitSays(t, c, "room#2 late", "room#3 lose", "room recovered 3")
	b.release()
	say(t, hb, "room", "b")
	waitSays(t, c, "room#2 late", "room#3 lose", "room recovered 3", "room#4 b")
	waitSays(t, old, "room#1 a", "room#2 late", "room#3 lose", "room#4 b")
}

// Close ends a recovery that waits for the history.
func TestHubCloseEndsRecoveries(t *testing.T) {
	b := newMemHistory(100)
	b.gate = make(chan struct{})
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:0")
	done := make(chan struct{})
	go func() { hb.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the recovery")
	}
}

func TestFrameJSON(t *testing.T) {
	for _, tc := range []struct {
		n    hub.Notice
		want string
	}{
		{hub.Notice{Topic: "r", Seq: 3, Op: gust.OpText, Data: []byte(`{"a":1}`)}, `{"topic":"r","seq":3,"data":{"a":1}}`},
		{hub.Notice{Topic: "r\"", Seq: 3, Op: gust.OpText, Data: []byte(`hi "you"`)}, `{"topic":"r\"","seq":3,"data":"hi \"you\""}`},
		{hub.Notice{Topic: "r", Seq: 3, Op: gust.OpBinary, Data: []byte{0, 1, 2}}, `{"topic":"r","seq":3,"data":"AAEC"}`},
		{hub.Notice{Kind: hub.NoticeGap, Topic: "r", Seq: 9}, `{"topic":"r","gap":9}`},
		{hub.Notice{Kind: hub.NoticeRecovered, Topic: "r", Seq: 9}, `{"topic":"r","recovered":9}`},
	} {
		got, op := hub.FrameJSON(nil, tc.n)
		require.Equal(t, tc.want, string(got))
		require.Equal(t, gust.OpText, op)
		require.True(t, json.Valid(got))
	}
}

// MemoryHistory gives the Hubs of one process numbered messages and
// recovery, keeping the last MaxPerTopic of each topic.
func TestMemoryHistory(t *testing.T) {
	b := hub.NewMemoryHistory(3)
	h1, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer h1.Close()
	h2, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	s1 := startHubServer(t, serverConfig{hub: h1, wrap: true})
	s2 := startHubServer(t, serverConfig{hub: h2, wrap: true})
	live := dialHub(t, s2.url, 0, false, true)
	live.send(t, "join:room")
	for _, text := range []string{"a", "b", "c", "d", "e"} {
		say(t, h1, "room", text)
	}
	waitSays(t, live, "room#1 a", "room#2 b", "room#3 c", "room#4 d", "room#5 e")

	c := dialHub(t, s1.url, 0, false, true)
	c.send(t, "since:room:3")
	waitSays(t, c, "room#4 d", "room#5 e", "room recovered 5")
	c = dialHub(t, s1.url, 0, false, true)
	c.send(t, "since:room:1")
	waitSays(t, c, "room gap 1", "room#3 c", "room#4 d", "room#5 e", "room recovered 5")

	require.NoError(t, h2.Close()) // unsubscribes: h1 still gets its messages
	say(t, h1, "room", "f")
	waitSays(t, c, "room gap 1", "room#3 c", "room#4 d", "room#5 e", "room recovered 5", "room#6 f")
}

func ExampleMemoryHistory() {
	h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(100)})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	// A client says where it stopped when it connects, as in
	// ws://host/ws?room=lobby&since=42: it gets what it missed, then what
	// follows, each message as {"topic":"lobby","seq":43,"data":...}.
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: h.Wrap(sinceHandler{h: h}),
		OnRequest: func(r *http.Request, _ http.Header, c *gust.Conn) error {
			since, err := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
			if err != nil {
				since = 0
			}
			c.Set("room", r.URL.Query().Get("room"))
			c.Set("since", since)
			return nil
		},
	}}
	_ = srv // srv.ListenAndServe("127.0.0.1:8080")
}

type sinceHandler struct {
	gust.BuiltinEventHandler
	h *hub.Hub
}

func (s sinceHandler) OnOpen(c *gust.Conn) {
	room, _ := c.Get("room")
	since, _ := c.Get("since")
	s.h.SubscribeSince(c, room.(string), since.(uint64))
}

// captureBroker is a HistoryBroker that only hands its handlers to the
// test, which plays the broker's side.
type captureBroker struct {
	memHistory
	record func(hub.Record)
}

func (b *captureBroker) SubscribeHistory(handler func(hub.Record)) (hub.Interest, error) {
	b.record = handler
	return nopInterest{}, nil
}

// Whatever a broker brings — not an envelope, a truncated one, a bad
// opcode, a sequence that goes back — the Hub neither panics nor sends
// its subscribers anything but well-formed messages.
func FuzzHubHistoryRecords(f *testing.F) {
	f.Add([]byte{1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, '{', '}'}, uint64(1), uint64(0))
	f.Add([]byte{1, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0}, uint64(5), uint64(9))
	f.Add([]byte{1, 1, 9, 1, 2, 3, 4, 5, 6, 7, 8}, uint64(0), uint64(0))
	b := &captureBroker{memHistory: *newMemHistory(10)}
	h, err := hub.New(&hub.Options{Broker: b, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(f, err)
	defer h.Close()
	f.Fuzz(func(t *testing.T, msg []byte, seq, prev uint64) {
		b.record(hub.Record{Topic: "t", Seq: seq, Prev: prev, Msg: msg})
		b.record(hub.Record{Topic: "", Seq: seq, Prev: prev, Msg: msg})
	})
}
