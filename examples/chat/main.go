// Command chat is a chat server over a gust Hub, with its web page: rooms,
// names, who is here, join and leave notices, and a page that reconnects by
// itself and gets what it missed.
//
//	cd examples/chat
//	go run .                                   # http://127.0.0.1:8080
//	go run . -addr 127.0.0.1:9000
//	go run . -netpoll                          # idle members hold no goroutine (Linux)
//	go run . -nats nats://127.0.0.1:4222       # one of several instances (nats-server -js)
//
// The page (static/index.html, embedded in the binary) opens
// ws://HOST/ws?name=NAME&room=ROOM&since=SEQ. Each connection joins its
// room's topic on the Hub; what one member says is published to the room,
// and every member's connection gets it through its own bounded outbox, so
// a member who stops reading cannot slow the others (its outbox overflows
// and the connection is closed with 1008: gust.OutboxCloseSlow).
//
// The Hub keeps each room's last messages (-history, 1,000 by default, and
// 64 MiB for all rooms together): in memory on one server, in NATS
// JetStream with -nats, where every instance sees the same rooms, members
// and history, so the page may reconnect to any of them. Every message the
// Hub sends is numbered within its room, in the history's epoch; the page
// keeps the epoch and the last number it saw and sends them as
// since=EPOCH:SEQ when it reconnects, and the server sends what it missed
// first (hub.Hub.SubscribeSince):
//
//	{"topic":"lobby","seq":41,"data":{"type":"message","name":"bob","text":"hi","time":...}}
//	{"topic":"lobby","gap":12,"epoch":"k3x9"}              messages after 12 are no longer kept
//	{"topic":"lobby","gap":0,"epoch":"k3x9","reset":true}  the history started over: drop what you show
//	{"topic":"lobby","recovered":41,"epoch":"k3x9"}        caught up; what follows is live
//
// since=0 (a first visit) gets the room's kept messages. A reset comes when
// the history is not the one the page's position was of (the server
// restarted with its history in memory, NATS lost its store) or the
// position is past its end: the page clears its log and shows what follows.
// Room names are at most 64 bytes of printable text, names 32; a connection
// is in one room. Who is in the room
// is presence (hub.Presence, across instances with -nats), sent straight to
// the page, not numbered: {"type":"welcome","room","name","members"} on
// connecting, then {"type":"join"|"leave","room","name"} as members come and
// go (a name in two tabs is one member). Messages from the page are JSON,
// {"id": "...", "text": "..."}, the id one the page made for the message
// (at most 64 bytes); once the history keeps the message the server
// answers {"ack": ID, "seq": N, "epoch": E}. The page keeps what it sent
// until it is acknowledged and sends it again, in order, when it
// reconnects: the Hub stores a message once per id within its duplicate
// window (hub.Hub.PublishOnce, 2 min), so a message written to an instance
// that died before storing it is stored when the page resends it, and one
// it stored is not stored twice. A sender's messages keep its order: the
// page resends what waits before anything new, and a frozen instance that
// wakes up and publishes a copy late (within the window) has it refused as
// a duplicate.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

//go:embed static
var static embed.FS

const (
	maxName = 32
	maxRoom = 64
	maxText = 2000
	maxID   = 64
)

// chat is the server: a Hub with one topic per room, and who is in which.
type chat struct {
	gust.BuiltinEventHandler
	hub      *hub.Hub
	presence hub.Presence
	upgrader *gust.Upgrader

	wsDone chan error // the Upgrader's Shutdown, run by server's hook

	roomsMu sync.Mutex
	rooms   map[string]*room // the rooms with connections here

	// stopping is set once the server shuts down: every member here is
	// being closed with 1001 and gust refuses their writes, so telling each
	// of the others leaving (the square of a room's size, a failed write
	// each) would be work for nobody. Other instances still hear of the
	// leaves through the Presence.
	stopping atomic.Bool
}

// room is a room with connections on this instance: one presence watcher
// tells them of its changes, a frame made once per change. (A watcher per
// connection would cost a call per member per change: when everyone
// leaves at once, on Shutdown, the square of the room's size.)
type room struct {
	ch    *chat
	n     int           // connections here in the room, under chat.roomsMu
	ready chan struct{} // closed once the watcher is started (enter)
	stop  func()        // the watcher's; set before ready is closed

	// mu orders a change told to the room against a member's welcome: the
	// member reads the list, queues its welcome and becomes a listener
	// under it, so a change told before that is in its list and one told
	// after reaches it after its welcome (the page applies events to the
	// list as set operations, so a change in both is harmless).
	mu        sync.Mutex
	listeners map[*gust.Conn]struct{}
}

// event is what the page receives: straight from the server (welcome,
// join, leave), or as the data of a numbered Hub message (message).
type event struct {
	Type    string   `json:"type"`
	Room    string   `json:"room"`
	Name    string   `json:"name,omitempty"`
	Text    string   `json:"text,omitempty"`
	Members []string `json:"members,omitempty"`
	Time    int64    `json:"time"` // Unix milliseconds
}

// newChat returns the chat server on the Hub and Presence given; netpoll
// sets Options.Netpoll.
func newChat(h *hub.Hub, p hub.Presence, netpoll bool) *chat {
	ch := &chat{hub: h, presence: p}
	// Wrap removes a connection from the Hub before OnClose runs.
	ch.upgrader = &gust.Upgrader{
		Handler: ch.hub.Wrap(ch),
		Options: gust.Options{
			MaxMessageSize: 16 << 10,
			Compression:    gust.CompressionOptions{Enabled: true},
			OutboxPolicy:   gust.OutboxCloseSlow, // a member who stops reading is closed with 1008
			// A member may be told of every other member of a room joining at
			// once (everyone reconnecting after a deploy): room for that
			// burst, 48 bytes a message (the frames are shared), rather than
			// closing as slow a member whose socket is full for a moment.
			OutboxSize: 2048,
			Netpoll:    netpoll,
		},
	}
	return ch
}

// newLocalChat is a chat on one server: history and presence in memory.
func newLocalChat(history int, netpoll bool) *chat {
	h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(&hub.MemoryHistoryOptions{MaxPerTopic: history})})
	if err != nil {
		panic(err) // a MemoryHistory never fails
	}
	return newChat(h, hub.NewLocalPresence(), netpoll)
}

// newClusterChat is a chat instance whose history and presence are on
// NATS, shared with every instance on the same server.
func newClusterChat(nc *nats.Conn, history int, netpoll bool) (*chat, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := gustnats.NewHistory(ctx, nc, &gustnats.HistoryOptions{MaxPerTopic: int64(history)})
	if err != nil {
		return nil, err
	}
	h, err := hub.New(&hub.Options{Broker: b})
	if err != nil {
		return nil, err
	}
	p, err := gustnats.NewPresence(nc, nil)
	if err != nil {
		h.Close()
		return nil, err
	}
	return newChat(h, p, netpoll), nil
}

// close ends the Hub and the Presence (after shutdown).
func (ch *chat) close() {
	ch.presence.Close()
	ch.hub.Close()
}

// handler serves the page and the WebSocket endpoint.
func (ch *chat) handler() http.Handler {
	mux := http.NewServeMux()
	page, err := fs.Sub(static, "static")
	if err != nil {
		panic(err)
	}
	mux.Handle("GET /", http.FileServerFS(page))
	// In netpoll mode ReadLoop returns as soon as the member is idle, and
	// this handler with it, while the WebSocket lives on: what the
	// connection needs is taken from r before Upgrade (r's context ends
	// with the handler), and leaving the room is OnClose's, never code
	// after ReadLoop.
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		name := clean(r.URL.Query().Get("name"), maxName, "anonymous")
		room := clean(r.URL.Query().Get("room"), maxRoom, "lobby")
		since, err := hub.ParsePosition(r.URL.Query().Get("since"))
		if err != nil {
			since = hub.Position{} // not a position: a first visit
		}
		c, err := ch.upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered with the HTTP error
		}
		c.Set("name", name)
		c.Set("room", room)
		c.Set("since", since)
		c.ReadLoop() // nothing after it: in netpoll mode it returns at once
	})
	return mux
}

// clean makes s a single line of printable text of at most max bytes
// (no control or format characters: no NUL, no right-to-left override),
// or returns def when nothing is left.
func clean(s string, max int, def string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	for len(s) > max {
		s = strings.ToValidUTF8(s[:max], "")
	}
	if s == "" {
		return def
	}
	return s
}

func who(c *gust.Conn) (name, room string) {
	n, _ := c.Get("name")
	r, _ := c.Get("room")
	return n.(string), r.(string)
}

func (ch *chat) OnOpen(c *gust.Conn) {
	name, topic := who(c)
	since, _ := c.Get("since")
	// Watch (the room's watcher, if this is its first connection here),
	// join, then list: a change between the first and the last shows in
	// both. The welcome and the events go through the outbox, in that
	// order (room.mu), so that the page never replaces its list with a
	// snapshot older than an event it applied.
	r := ch.enter(topic)
	if err := ch.presence.Join(topic, name); err != nil {
		log.Printf("chat: join %q: %v", topic, err)
	}
	r.mu.Lock()
	members := ch.presence.Members(nil, topic)
	ch.sendAsync(c, event{Type: "welcome", Room: topic, Name: name, Members: members})
	r.listeners[c] = struct{}{}
	r.mu.Unlock()
	if err := ch.hub.SubscribeSince(c, topic, since.(hub.Position)); err != nil {
		log.Printf("chat: subscribe %v: %v", c.RemoteAddr(), err)
	}
}

// enter counts a connection into topic's room. The room's first connection
// on this instance makes it and starts its watcher, outside chat.roomsMu (a
// cluster Presence's first Watch of a topic waits for the other instances'
// members, up to its SnapshotTimeout, and every other room's connections
// must not wait for that); the others wait for that Watch, on the room's
// ready.
func (ch *chat) enter(topic string) *room {
	ch.roomsMu.Lock()
	if r := ch.rooms[topic]; r != nil {
		r.n++
		ch.roomsMu.Unlock()
		<-r.ready
		return r
	}
	r := &room{ch: ch, n: 1, ready: make(chan struct{}), listeners: make(map[*gust.Conn]struct{})}
	if ch.rooms == nil {
		ch.rooms = make(map[string]*room)
	}
	ch.rooms[topic] = r
	ch.roomsMu.Unlock()
	stop, err := ch.presence.Watch(topic, r.tell)
	if err != nil {
		log.Printf("chat: watch %q: %v", topic, err)
		stop = func() {}
	}
	r.stop = stop
	close(r.ready)
	return r
}

// leave undoes enter for c; the room's last connection here stops its
// watcher (outside chat.roomsMu, as enter starts it).
func (ch *chat) leave(topic string, c *gust.Conn) {
	ch.roomsMu.Lock()
	r := ch.rooms[topic]
	if r == nil {
		ch.roomsMu.Unlock()
		return // never entered
	}
	r.mu.Lock()
	delete(r.listeners, c)
	r.mu.Unlock()
	r.n--
	last := r.n == 0
	if last {
		delete(ch.rooms, topic)
	}
	ch.roomsMu.Unlock()
	if last {
		r.stop()
	}
}

// tell sends e to the room's connections here, on the Presence's
// goroutine: queued, never waiting for a slow member (a full outbox
// closes it).
func (r *room) tell(e hub.PresenceEvent) {
	if r.ch.stopping.Load() {
		return
	}
	ev := event{Type: "leave", Room: e.Topic, Name: e.Member}
	if e.Joined {
		ev.Type = "join"
	}
	pm, _ := gust.NewPreparedMessage(gust.OpText, ev.json()) // an OpText message cannot fail
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.listeners {
		c.WritePreparedAsync(pm, nil)
	}
}

func (ch *chat) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	var in struct {
		ID   string `json:"id"`
		Text string `json:"text"`
	}
	if m.Opcode != gust.OpText || json.Unmarshal(m.Data, &in) != nil {
		c.Close(4000, "expected JSON text messages")
		return
	}
	text := strings.TrimSpace(in.Text)
	if len(text) > maxText {
		text = strings.ToValidUTF8(text[:maxText], "")
	}
	name, room := who(c)
	e := event{Type: "message", Room: room, Name: name, Text: text, Time: time.Now().UnixMilli()}
	b, _ := json.Marshal(e)
	switch {
	case in.ID == "" && text == "":
	case in.ID == "":
		if err := ch.hub.Publish(room, gust.OpText, b); err != nil {
			log.Printf("chat: publish to %q: %v", room, err)
		}
	case len(in.ID) > maxID || text == "":
		c.Close(4000, "a message id is 1 to 64 bytes, its text not empty")
	default:
		// Stored once per id, however many times the page sends it; the
		// acknowledgement tells the page it may stop resending.
		err := ch.hub.PublishOnce(room, gust.OpText, b, name+"/"+in.ID, func(pos hub.Position, err error) {
			if err != nil {
				return // not acknowledged: the page sends it again when it reconnects
			}
			ack, _ := json.Marshal(struct {
				Ack   string `json:"ack"`
				Seq   uint64 `json:"seq"`
				Epoch string `json:"epoch"`
			}{in.ID, pos.Seq, pos.Epoch})
			c.WriteAsync(gust.OpText, ack, nil)
		})
		if err != nil {
			log.Printf("chat: publish to %q: %v", room, err)
		}
	}
}

func (ch *chat) OnClose(c *gust.Conn, err error) {
	name, topic := who(c)
	ch.leave(topic, c)
	if err := ch.presence.Leave(topic, name); err != nil {
		log.Printf("chat: leave %q: %v", topic, err)
	}
}

// sendAsync queues e in c's outbox, where it stays in order with the
// presence events (room.tell).
func (ch *chat) sendAsync(c *gust.Conn, e event) {
	c.WriteAsync(gust.OpText, e.json(), nil) // a full outbox closes a slow member
}

// json returns e as the page receives it, stamped with the time now.
func (e event) json() []byte {
	e.Time = time.Now().UnixMilli()
	b, _ := json.Marshal(e)
	return b
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	netpoll := flag.Bool("netpoll", false, "netpoll mode (Linux): idle members wait on gust's event loops, not on a goroutine each")
	natsURL := flag.String("nats", "", "NATS server URL (with JetStream): share rooms, members and history with the other instances")
	history := flag.Int("history", 1000, "messages kept per room")
	flag.Parse()

	ch, err := start(*natsURL, *history, *netpoll)
	if err != nil {
		log.Fatal(err)
	}
	defer ch.close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := ch.server(10 * time.Second)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shut := make(chan error, 1)
	go func() {
		<-ctx.Done()
		shut <- ch.shutdown(srv, 10*time.Second)
	}()
	log.Printf("chat on http://%s", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	if err := <-shut; err != nil {
		log.Printf("chat: shutdown: %v", err)
	}
}

// start makes the chat: on its own, or an instance of a cluster on NATS.
func start(natsURL string, history int, netpoll bool) (*chat, error) {
	if natsURL == "" {
		return newLocalChat(history, netpoll), nil
	}
	nc, err := nats.Connect(natsURL, nats.Name("gust chat"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("chat: connecting to NATS: %w", err)
	}
	ch, err := newClusterChat(nc, history, netpoll)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("chat: %w", err)
	}
	log.Printf("chat: an instance of the cluster on %s", natsURL)
	return ch, nil
}

// server returns the chat's http.Server. net/http's Shutdown stops
// accepting and ends idle HTTP connections, but does not cover the
// WebSockets, which net/http handed over to gust: a hook registered with
// RegisterOnShutdown runs the Upgrader's Shutdown, which closes each with
// 1001 (the pages reconnect by themselves, to the next server) and waits
// for them, within grace. The hook runs beside srv.Shutdown, which may wait
// up to 5 s for a connection a browser opened ahead of need and never used
// (net/http counts it idle only then): the WebSockets do not wait behind it.
func (ch *chat) server(grace time.Duration) *http.Server {
	srv := &http.Server{Handler: ch.handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	ch.wsDone = make(chan error, 1)
	srv.RegisterOnShutdown(func() { // in a goroutine of its own, with no context
		ch.stopping.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		ch.wsDone <- ch.upgrader.Shutdown(ctx)
	})
	return srv
}

// shutdown stops srv, made by server, and waits for it and for the
// WebSockets its hook closes, within grace.
func (ch *chat) shutdown(srv *http.Server, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(ctx)
	return errors.Join(err, <-ch.wsDone)
}
