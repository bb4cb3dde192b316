// Command chat is a chat server over a gust Hub, with its web page: rooms,
// names, join and leave notices, and a page that reconnects by itself.
//
//	go run ./examples/chat                       # http://127.0.0.1:8080
//	go run ./examples/chat -addr 127.0.0.1:9000
//	go run ./examples/chat -netpoll              # idle members hold no goroutine (Linux)
//
// The page (static/index.html, embedded in the binary) opens
// ws://HOST/ws?name=NAME&room=ROOM. Each connection joins its room's topic
// on the Hub; what one member says is published to the room, and every
// member's connection gets it through its own bounded outbox, so a member
// who stops reading cannot slow the others (its outbox overflows and the
// connection is closed with 1008: gust.OutboxCloseSlow).
//
// Messages from the page are JSON: {"text": "..."}. Messages to the page
// are JSON too: {"type": "welcome"|"join"|"leave"|"message", "room", "name",
// "text", "members"}.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

//go:embed static
var static embed.FS

const (
	maxName = 32
	maxText = 2000
)

// chat is the server: a Hub with one topic per room, and who is in which.
type chat struct {
	gust.BuiltinEventHandler
	hub      *hub.Hub
	upgrader *gust.Upgrader

	mu      sync.Mutex
	rooms   map[string]map[*gust.Conn]string // room -> connection -> name
	version uint64                           // of the member lists, under mu

	wsDone chan error // the Upgrader's Shutdown, run by server's hook
}

// event is what the page receives.
type event struct {
	Type    string   `json:"type"`
	Room    string   `json:"room"`
	Name    string   `json:"name,omitempty"`
	Text    string   `json:"text,omitempty"`
	Members []string `json:"members,omitempty"`
	Time    int64    `json:"time"` // Unix milliseconds
	// Version numbers the member lists: a page keeps the newest list it
	// has seen, whatever order the welcome (written directly) and the
	// notices (through the Hub) arrive in.
	Version uint64 `json:"version,omitempty"`
}

// newChat returns the chat server; netpoll sets Options.Netpoll.
func newChat(netpoll bool) *chat {
	ch := &chat{hub: new(hub.Hub), rooms: make(map[string]map[*gust.Conn]string)}
	// Wrap removes a connection from the Hub before OnClose runs, so the
	// "left" notice does not go to the connection that left.
	ch.upgrader = &gust.Upgrader{
		Handler: ch.hub.Wrap(ch),
		Options: gust.Options{
			MaxMessageSize: 16 << 10,
			Compression:    gust.CompressionOptions{Enabled: true},
			OutboxPolicy:   gust.OutboxCloseSlow, // a member who stops reading is closed with 1008
			Netpoll:        netpoll,
		},
	}
	return ch
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
		name := clean(r.URL.Query().Get("name"), "anonymous")
		room := clean(r.URL.Query().Get("room"), "lobby")
		c, err := ch.upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered with the HTTP error
		}
		c.Set("name", name)
		c.Set("room", room)
		c.ReadLoop() // nothing after it: in netpoll mode it returns at once
	})
	return mux
}

// clean trims s to a short single line, or returns def when nothing is left.
func clean(s, def string) string {
	s = strings.Join(strings.Fields(s), " ")
	for len(s) > maxName || !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s[:min(len(s), maxName)], "")
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
	name, room := who(c)
	// Subscribe first, so that no notice published after the welcome's
	// member list is missed.
	if err := ch.hub.Subscribe(c, room); err != nil {
		log.Printf("chat: subscribe %v: %v", c.RemoteAddr(), err)
		return
	}
	ch.mu.Lock()
	if ch.rooms[room] == nil {
		ch.rooms[room] = make(map[*gust.Conn]string)
	}
	ch.rooms[room][c] = name
	ch.version++
	members, version := ch.membersLocked(room), ch.version
	// The notice is published under mu, so that notices go out in the
	// order the lists changed. Publish never blocks: it only queues.
	ch.publish(event{Type: "join", Room: room, Name: name, Members: members, Version: version})
	ch.mu.Unlock()
	ch.send(c, event{Type: "welcome", Room: room, Name: name, Members: members, Version: version})
}

func (ch *chat) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	var in struct {
		Text string `json:"text"`
	}
	if m.Opcode != gust.OpText || json.Unmarshal(m.Data, &in) != nil {
		c.Close(4000, "expected JSON text messages")
		return
	}
	text := strings.TrimSpace(in.Text)
	if text == "" {
		return
	}
	if len(text) > maxText {
		text = strings.ToValidUTF8(text[:maxText], "")
	}
	name, room := who(c)
	ch.publish(event{Type: "message", Room: room, Name: name, Text: text})
}

func (ch *chat) OnClose(c *gust.Conn, err error) {
	name, room := who(c)
	ch.mu.Lock()
	delete(ch.rooms[room], c)
	ch.version++
	members := ch.membersLocked(room)
	if len(ch.rooms[room]) == 0 {
		delete(ch.rooms, room)
	}
	ch.publish(event{Type: "leave", Room: room, Name: name, Members: members, Version: ch.version}) // under mu: see OnOpen
	ch.mu.Unlock()
}

func (ch *chat) membersLocked(room string) []string {
	var names []string
	for _, n := range ch.rooms[room] {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (ch *chat) publish(e event) {
	e.Time = time.Now().UnixMilli()
	b, _ := json.Marshal(e)
	if err := ch.hub.Publish(e.Room, gust.OpText, b); err != nil {
		log.Printf("chat: publish to %q: %v", e.Room, err)
	}
}

func (ch *chat) send(c *gust.Conn, e event) {
	e.Time = time.Now().UnixMilli()
	b, _ := json.Marshal(e)
	if err := c.WriteMessage(gust.OpText, b); err != nil {
		log.Printf("chat: write to %v: %v", c.RemoteAddr(), err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	netpoll := flag.Bool("netpoll", false, "netpoll mode (Linux): idle members wait on gust's event loops, not on a goroutine each")
	flag.Parse()

	ch := newChat(*netpoll)
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
