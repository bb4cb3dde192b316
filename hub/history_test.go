package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	keep  int
	epoch string
	gate  chan struct{} // when not nil, History waits for it to close
	held  []hub.Record  // the "late" ones, guarded by deliver

	deliver  sync.Mutex // held while handlers run: one at a time, in order
	mu       sync.Mutex
	seq      uint64
	records  map[string][]hub.Record
	handlers []func(hub.Record)
}

func newMemHistory(keep int) *memHistory {
	return &memHistory{keep: keep, epoch: "e1", records: make(map[string][]hub.Record)}
}

func (b *memHistory) Epoch() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

// restart loses every record and starts numbering anew, in epoch.
func (b *memHistory) restart(epoch string) {
	b.deliver.Lock()
	defer b.deliver.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch, b.seq = epoch, 0
	clear(b.records)
}

var _ hub.HistoryBroker = (*memHistory)(nil)

func (b *memHistory) PublishAsync(topic string, msg []byte, _ string, done func(hub.Position, error)) error {
	r := b.publish(topic, msg)
	if done != nil {
		done(hub.Position{Epoch: r.Epoch, Seq: r.Seq}, nil)
	}
	return nil
}

func (b *memHistory) Publish(topic string, msg []byte) error {
	b.publish(topic, msg)
	return nil
}

func (b *memHistory) publish(topic string, msg []byte) hub.Record {
	b.deliver.Lock()
	defer b.deliver.Unlock()
	b.mu.Lock()
	b.seq++
	rs := b.records[topic]
	r := hub.Record{Topic: topic, Epoch: b.epoch, Seq: b.seq, Msg: slices.Clone(msg)}
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
	return r
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
	Epoch     string          `json:"epoch"`
	Reset     bool            `json:"reset"`
}

// says returns what a client received, one line each: "T#seq text",
// "T gap N", "T reset EPOCH", "T recovered N", and "@EPOCH" after the last
// two when the epoch is not e1.
func says(t *testing.T, c *hubClient) []string {
	t.Helper()
	var out []string
	for _, s := range c.textsNow() {
		var n notice
		require.NoError(t, json.Unmarshal([]byte(s), &n), s)
		at := ""
		if n.Epoch != "e1" {
			at = " @" + n.Epoch
		}
		switch {
		case n.Gap != nil && n.Reset:
			require.Zero(t, *n.Gap, s)
			out = append(out, fmt.Sprintf("%s reset%s", n.Topic, at))
		case n.Gap != nil:
			out = append(out, fmt.Sprintf("%s gap %d%s", n.Topic, *n.Gap, at))
		case n.Recovered != nil:
			out = append(out, fmt.Sprintf("%s recovered %d%s", n.Topic, *n.Recovered, at))
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
	_, hb, s := historyHub(t, 4, nil)
	for _, text := range []string{"a", "b", "c", "d", "e", "f"} { // 1..6; the history keeps 3..6
		say(t, hb, "room", text)
	}

	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:e1:4")
	waitSays(t, c, "room#5 e", "room#6 f", "room recovered 6")
	say(t, hb, "room", "g")
	waitSays(t, c, "room#5 e", "room#6 f", "room recovered 6", "room#7 g")
	c.send(t, "since:room:e1:1") // subscribed already: nothing more
	time.Sleep(20 * time.Millisecond)
	require.Len(t, says(t, c), 4)

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:e1:0")
	waitSays(t, c, "room#4 d", "room#5 e", "room#6 f", "room#7 g", "room recovered 7")

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:e1:2") // 2 is gone
	waitSays(t, c, "room gap 2", "room#4 d", "room#5 e", "room#6 f", "room#7 g", "room recovered 7")

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:empty:e1:9") // nothing at all: past the end, start over
	waitSays(t, c, "empty reset", "empty recovered 0")

	c = dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:e1:7") // up to date
	waitSays(t, c, "room recovered 7")

	plain, err := hub.New(nil)
	require.NoError(t, err)
	require.ErrorIs(t, plain.SubscribeSince(c.conn, "room", hub.Position{Epoch: "e1", Seq: 1}), hub.ErrNoHistory)
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
	c.send(t, "since:room:e1:1") // waits at the gate
	say(t, hb, "room", "c")      // stored (so in the history) and live
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
	_, hb, s := historyHub(t, 100, nil)
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
	b, hb, s := historyHub(t, 100, nil)
	old := dialHub(t, s.url, 0, false, true)
	old.send(t, "join:room")
	say(t, hb, "room", "a")
	say(t, hb, "room", "late") // stored; the Broker brings it later
	say(t, hb, "room", "lose") // stored, never brought: repaired with the next

	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:e1:1")
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
	c.send(t, "since:room:e1:0")
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
		{hub.Notice{Kind: hub.NoticeGap, Topic: "r", Seq: 9, Epoch: "k3"}, `{"topic":"r","gap":9,"epoch":"k3"}`},
		{hub.Notice{Kind: hub.NoticeGap, Topic: "r", Epoch: "k3", Reset: true}, `{"topic":"r","gap":0,"epoch":"k3","reset":true}`},
		{hub.Notice{Kind: hub.NoticeRecovered, Topic: "r", Seq: 9, Epoch: "k3"}, `{"topic":"r","recovered":9,"epoch":"k3"}`},
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
	b := hub.NewMemoryHistory(&hub.MemoryHistoryOptions{MaxPerTopic: 3})
	at := " @" + b.Epoch()
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
	c.send(t, "since:room:"+b.Epoch()+":3")
	waitSays(t, c, "room#4 d", "room#5 e", "room recovered 5"+at)
	c = dialHub(t, s1.url, 0, false, true)
	c.send(t, "since:room:"+b.Epoch()+":1")
	waitSays(t, c, "room gap 1"+at, "room#3 c", "room#4 d", "room#5 e", "room recovered 5"+at)

	require.Equal(t, hub.HistoryStats{Topics: 1, Records: 3, Bytes: b.Stats().Bytes}, h1.Stats().History)
	require.NoError(t, h2.Close()) // unsubscribes: h1 still gets its messages
	say(t, h1, "room", "f")
	waitSays(t, c, "room gap 1"+at, "room#3 c", "room#4 d", "room#5 e", "room recovered 5"+at, "room#6 f")

	// A position from another MemoryHistory (before a restart) starts over.
	c = dialHub(t, s1.url, 0, false, true)
	c.send(t, "since:room:"+hub.NewMemoryHistory(nil).Epoch()+":5")
	waitSays(t, c, "room reset"+at, "room#4 d", "room#5 e", "room#6 f", "room recovered 6"+at)
}

func ExampleMemoryHistory() {
	h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(nil)})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	// A client says where it stopped when it connects, as in
	// ws://host/ws?room=lobby&since=k3x9:42 (the epoch of its last
	// "recovered" or "gap", the seq of its last message): it gets what it
	// missed, then what follows, each message as
	// {"topic":"lobby","seq":43,"data":...}.
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: h.Wrap(sinceHandler{h: h}),
		OnRequest: func(r *http.Request, _ http.Header, c *gust.Conn) error {
			since, err := hub.ParsePosition(r.URL.Query().Get("since"))
			if err != nil {
				return &gust.HandshakeError{Status: http.StatusBadRequest, Body: []byte(err.Error())}
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
	s.h.SubscribeSince(c, room.(string), since.(hub.Position))
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

// A position the history does not know never mutes the member: past the
// last sequence (a MemoryHistory restarted, a stream re-created, a client
// that makes one up), of another epoch, or without one, it is told to
// start over, gets all that is kept, then every live message.
func TestHubSubscribeSinceStartsOverNeverMutes(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts *gust.Options) {
		_, hb, s := historyHub(t, 100, opts)
		for _, text := range []string{"a", "b", "c"} {
			say(t, hb, "room", text)
		}
		var clients []*hubClient
		for _, since := range []string{"e1:60", "e1:18446744073709551615", "e0:2", "2", ":2"} {
			c := dialHub(t, s.url, 0, false, true)
			c.send(t, "since:room:"+since)
			waitSays(t, c, "room reset", "room#1 a", "room#2 b", "room#3 c", "room recovered 3")
			clients = append(clients, c)
		}
		say(t, hb, "room", "d")
		for _, c := range clients {
			waitSays(t, c, "room reset", "room#1 a", "room#2 b", "room#3 c", "room recovered 3", "room#4 d")
		}
		c := dialHub(t, s.url, 0, false, true)
		c.send(t, "since:room:e1:2")
		waitSays(t, c, "room#3 c", "room#4 d", "room recovered 4")
		st := hb.Stats()
		require.Equal(t, [3]uint64{6, 5, 5}, [3]uint64{st.Recoveries, st.Gaps, st.Resets}, "recoveries, gaps, resets")
	})
}

// When the history starts over (the broker lost its store), a live member
// and one recovering are told, with the new epoch, before the first
// message numbered anew, which reaches them although its sequence is
// below the ones they had.
func TestHubHistoryStartsOverUnderItsMembers(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts *gust.Options) {
		b, hb, s := historyHub(t, 100, opts)
		live := dialHub(t, s.url, 0, false, true)
		live.send(t, "since:room:e1:0")
		waitSays(t, live, "room recovered 0") // live from here on
		for _, text := range []string{"a", "b", "c"} {
			say(t, hb, "room", text)
		}
		waitSays(t, live, "room recovered 0", "room#1 a", "room#2 b", "room#3 c")

		b.gate = make(chan struct{})
		recovering := dialHub(t, s.url, 0, false, true)
		recovering.send(t, "since:room:e1:2") // waits at the gate
		b.restart("e2")
		say(t, hb, "room", "x")
		waitSays(t, live, "room recovered 0", "room#1 a", "room#2 b", "room#3 c", "room reset @e2", "room#1 x")
		close(b.gate)
		waitSays(t, recovering, "room reset @e2", "room#1 x", "room recovered 1 @e2")
		say(t, hb, "room", "y")
		waitSays(t, recovering, "room reset @e2", "room#1 x", "room recovered 1 @e2", "room#2 y")
		waitSays(t, live, "room recovered 0", "room#1 a", "room#2 b", "room#3 c", "room reset @e2", "room#1 x", "room#2 y")
	})
}

// framingHub returns a Hub on a MemoryHistory, closed when the test ends,
// and the count of the messages it has framed.
func framingHub(t *testing.T) (*hub.Hub, *atomic.Int64) {
	frames := new(atomic.Int64)
	hb, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(nil), Frame: func(dst []byte, n hub.Notice) ([]byte, gust.Opcode) {
		if n.Kind == hub.NoticeMessage {
			frames.Add(1)
		}
		return hub.FrameJSON(dst, n)
	}})
	require.NoError(t, err)
	t.Cleanup(func() { hb.Close() })
	return hb, frames
}

// Members that recover a topic and never read do not hold up the room:
// each record is framed once for all of them, each holds at most a window
// of it in its outbox, and a member who reads gets the history and the
// live messages.
func TestHubRecoveryFramesOnceAndFeedsAsItDrains(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts *gust.Options) {
		hb, frames := framingHub(t)
		const kept, members, window = 300, 40, 64
		text := strings.Repeat("x", 2000)
		for range kept {
			say(t, hb, "room", text)
		}
		require.Zero(t, frames.Load(), "a message without subscribers is not framed")
		s := startHubServer(t, serverConfig{hub: hb, wrap: true, opts: opts, autoJoin: "room", autoSince: &hub.Position{}, sndbuf: 4096})
		for range members {
			dialHub(t, s.url, 4096, false, false) // never reads
		}
		waitFor(t, "every recovery stuck with a full window", 10*time.Second, func() bool {
			return hb.Stats().Pending == members*window
		})
		require.LessOrEqual(t, frames.Load(), int64(kept), "each record framed once, not once per member")
		reader := dialHub(t, s.url, 0, false, true)
		waitFor(t, "the reader's recovery", 10*time.Second, func() bool { return int(reader.count.Load()) == kept+1 })
		say(t, hb, "room", "live")
		waitFor(t, "the live message", 10*time.Second, func() bool { return int(reader.count.Load()) == kept+2 })
		require.Equal(t, int64(members*window), hb.Stats().Pending, "the stuck members hold a window each")
		require.LessOrEqual(t, frames.Load(), int64(kept+1))
	})
}

// Members who recover a topic one after another, each done before the
// next comes (a crowd reconnecting over a second), share its framed
// records too: they outlive the last recovery by a second.
func TestHubRecoveriesInTurnFrameOnce(t *testing.T) {
	hb, frames := framingHub(t)
	const kept = 100
	for range kept {
		say(t, hb, "room", "x")
	}
	s := startHubServer(t, serverConfig{hub: hb, wrap: true, opts: &gust.Options{}, autoJoin: "room", autoSince: &hub.Position{}})
	for range 3 {
		reader := dialHub(t, s.url, 0, false, true)
		waitFor(t, "the reader's recovery", 10*time.Second, func() bool { return int(reader.count.Load()) == kept+1 })
	}
	require.Equal(t, int64(kept), frames.Load(), "each record framed once for the three")
}

// MemoryHistory's memory is bounded by MaxBytes for all topics together,
// however many topics clients make: the oldest messages of all topics go
// first, a topic whose messages have all gone is forgotten, and messages
// past MaxAge go too.
func TestMemoryHistoryBudget(t *testing.T) {
	const budget = 1 << 20
	b := hub.NewMemoryHistory(&hub.MemoryHistoryOptions{MaxPerTopic: 200, MaxBytes: budget})
	payload := []byte(strings.Repeat("x", 2000))
	const topics, each = 300, 50
	for i := range topics {
		for range each {
			require.NoError(t, b.Publish(fmt.Sprintf("room-%d", i), payload))
		}
		require.LessOrEqual(t, b.Stats().Bytes, int64(budget))
	}
	st := b.Stats()
	t.Logf("%d topics × %d messages of %d bytes into a %d-byte budget: %+v", topics, each, len(payload), budget, st)
	require.Greater(t, st.Bytes, int64(budget*9/10), "the budget is used")
	require.Less(t, st.Topics, topics/10, "the oldest topics are forgotten")
	// The newest messages are the ones kept.
	var got []uint64
	require.NoError(t, b.History(context.Background(), fmt.Sprintf("room-%d", topics-1), 0, func(r hub.Record) error {
		got = append(got, r.Seq)
		return nil
	}))
	require.Len(t, got, each)
	require.Equal(t, uint64(topics*each), got[len(got)-1])
	// What the history holds on the heap: the heap with it, less the heap
	// without it.
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	runtime.KeepAlive(b)
	b = nil
	runtime.GC()
	runtime.ReadMemStats(&without)
	held := int64(with.HeapAlloc) - int64(without.HeapAlloc)
	t.Logf("the history holds %d bytes of heap (%.2f× the budget)", held, float64(held)/budget)
	require.Less(t, held, int64(budget*11/10), "the heap follows the budget")

	aged := hub.NewMemoryHistory(&hub.MemoryHistoryOptions{MaxAge: 50 * time.Millisecond})
	require.NoError(t, aged.Publish("gone", payload))
	waitFor(t, "the message past MaxAge to go", 5*time.Second, func() bool {
		require.NoError(t, aged.Publish("tick", nil))
		n := 0
		require.NoError(t, aged.History(context.Background(), "gone", 0, func(hub.Record) error { n++; return nil }))
		return n == 0 && aged.Stats().Topics == 1
	})
}

// A client's message sent with an id is acknowledged with its position
// once stored; sent again with the same id (the page resends what was not
// acknowledged when it reconnects), it is acknowledged with the first
// position and neither stored nor delivered again.
func TestHubPublishOnce(t *testing.T) {
	b := hub.NewMemoryHistory(&hub.MemoryHistoryOptions{DuplicateWindow: time.Hour})
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, wrap: true})
	c := dialHub(t, s.url, 0, false, true)
	c.send(t, "since:room:0")
	waitSays(t, c, "room recovered 0 @"+b.Epoch())
	type ack struct {
		pos hub.Position
		err error
	}
	acks := make(chan ack, 10)
	send := func(id, text string) ack {
		t.Helper()
		require.NoError(t, hb.PublishOnce("room", gust.OpText, fmt.Appendf(nil, `{"text":%q}`, text), id,
			func(pos hub.Position, err error) { acks <- ack{pos, err} }))
		select {
		case a := <-acks:
			return a
		case <-time.After(5 * time.Second):
			t.Fatal("no acknowledgement")
		}
		return ack{}
	}
	first := send("alice/1", "hello")
	require.NoError(t, first.err)
	require.Equal(t, hub.Position{Epoch: b.Epoch(), Seq: 1}, first.pos)
	require.Equal(t, first, send("alice/1", "hello"), "a resend: the first position")
	require.Equal(t, hub.Position{Epoch: b.Epoch(), Seq: 2}, send("alice/2", "again").pos)
	require.Equal(t, first, send("alice/1", "hello"))
	at := " @" + b.Epoch()
	waitSays(t, c, "room recovered 0"+at, "room#1 hello", "room#2 again")
	require.Equal(t, 2, b.Stats().Records)

	// Without a history: published at once, acknowledged with no position.
	plain := new(hub.Hub)
	var got []hub.Position
	require.NoError(t, plain.PublishOnce("room", gust.OpText, []byte("x"), "a/1", func(pos hub.Position, err error) {
		require.NoError(t, err)
		got = append(got, pos)
	}))
	require.Equal(t, []hub.Position{{}}, got)
}

// MemoryHistory remembers an id for DuplicateWindow: after it, the same id
// is a new message.
func TestMemoryHistoryDuplicateWindow(t *testing.T) {
	b := hub.NewMemoryHistory(&hub.MemoryHistoryOptions{DuplicateWindow: 30 * time.Millisecond})
	seq := func(id string) uint64 {
		var got hub.Position
		require.NoError(t, b.PublishAsync("t", []byte("m"), id, func(pos hub.Position, err error) { got = pos }))
		return got.Seq
	}
	require.Equal(t, uint64(1), seq("x"))
	require.Equal(t, uint64(1), seq("x"))
	require.Equal(t, uint64(2), seq(""), "no id: always stored")
	start := time.Now()
	waitFor(t, "the window to pass", 5*time.Second, func() bool { return time.Since(start) > 40*time.Millisecond })
	require.Equal(t, uint64(3), seq("x"), "after the window, stored again")
	require.Equal(t, uint64(3), seq("x"))
}

// When the history starts over and the Broker brings a topic's first
// messages of the new epoch late or not at all (they were stored before
// this process's subscription was back), the Hub fetches them before the
// first one it does get: its members are told to reset, then get every
// message of the new epoch.
func TestHubRepairsTheStartOfANewEpoch(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts *gust.Options) {
		b, hb, s := historyHub(t, 100, opts)
		c := dialHub(t, s.url, 0, false, true)
		c.send(t, "since:room:e1:0")
		waitSays(t, c, "room recovered 0") // live from here on
		say(t, hb, "room", "a")
		waitSays(t, c, "room recovered 0", "room#1 a")
		b.restart("e2")
		say(t, hb, "room", "lose") // stored in e2, never brought
		say(t, hb, "room", "y")
		waitSays(t, c, "room recovered 0", "room#1 a", "room reset @e2", "room#1 lose", "room#2 y")
	})
}

// forEachMode runs f with the Hub's connections in goroutine mode and in
// netpoll mode.
func forEachMode(t *testing.T, f func(t *testing.T, opts *gust.Options)) {
	for _, netpoll := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "netpoll"}[netpoll], func(t *testing.T) {
			f(t, &gust.Options{Netpoll: netpoll})
		})
	}
}

// historyHub is a Hub on a memHistory keeping keep records a topic, and a
// Server of its connections (opts, if not nil, theirs), closed when the
// test ends.
func historyHub(t *testing.T, keep int, opts *gust.Options) (*memHistory, *hub.Hub, *hubServer) {
	t.Helper()
	b := newMemHistory(keep)
	hb, err := hub.New(&hub.Options{Broker: b})
	require.NoError(t, err)
	t.Cleanup(func() { hb.Close() })
	return b, hb, startHubServer(t, serverConfig{hub: hb, wrap: true, opts: opts})
}
