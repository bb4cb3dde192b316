package gust_test

// The code snippets of MIGRATING.md, compiled. TestMigratingSnippetsCompile
// checks that every ```go block of MIGRATING.md appears here (whitespace
// aside), so that the guide cannot drift from code that compiles. Edit a
// snippet in both places.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust"
)

func TestMigratingSnippetsCompile(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("MIGRATING.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("migrating_test.go")
	if err != nil {
		t.Fatal(err)
	}
	space := regexp.MustCompile(`\s+`)
	norm := func(b []byte) string { return strings.TrimSpace(space.ReplaceAllString(string(b), " ")) }
	code := norm(src)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 10 {
		t.Fatalf("found %d go blocks in MIGRATING.md; expected the guide's snippets", len(blocks))
	}
	for _, b := range blocks {
		if s := norm(b[1]); !strings.Contains(code, s) {
			t.Errorf("MIGRATING.md snippet is not in migrating_test.go:\n%s", b[1])
		}
	}
}

// The snippets below are compiled, not called (a few are run by the
// TestMigrating* tests); this list tells staticcheck (U1000) they are meant.
var _ = []any{
	chatHandler{}, migrateUpgrader, migrateDial, migrateHeldConn, api{},
	migrateGwsUpgrader, migrateGwsAuthorize, migrateGwsServer, keeper{}, slowAPI{},
	clientCompression, loggerFor, roomUpgrader, serveChat, relay,
}

// --- from gorilla/websocket ---

type chatHandler struct{ gust.BuiltinEventHandler }

func (chatHandler) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close() // gives the buffer back: m.Data is not valid after this
	c.WriteMessage(m.Opcode, m.Data)
}

func migrateUpgrader() {
	upgrader := &gust.Upgrader{
		Handler:      chatHandler{},
		Subprotocols: []string{"chat.v1"},
		CheckOrigin:  func(r *http.Request) bool { return r.Header.Get("Origin") == "https://example.com" },
		Options: gust.Options{
			MaxMessageSize: 1 << 20, // gorilla: conn.SetReadLimit(1 << 20)
			Compression:    gust.CompressionOptions{Enabled: true},
		},
	}
	http.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered the request already
		}
		c.ReadLoop() // instead of for { conn.ReadMessage() }; returns after OnClose
	})
}

func migrateDial(handler gust.Event, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := gust.Dial(ctx, "wss://example.com/ws", handler, &gust.DialOptions{
		Header:       http.Header{"Authorization": {"Bearer " + token}},
		Subprotocols: []string{"chat.v1"},
		Proxy:        http.ProxyFromEnvironment,
		Options:      gust.Options{Compression: gust.CompressionOptions{Enabled: true}},
	})
	if err != nil {
		var he *gust.HandshakeError // every Dial error is one
		if errors.As(err, &he) && he.Status != 0 {
			log.Printf("refused with %d: %s", he.Status, he.Body)
		}
		return err
	}
	log.Println(resp.Header.Get("Set-Cookie"), c.Subprotocol())
	go c.ReadLoop()
	return nil
}

func migrateHeldConn(handler gust.Event, held net.Conn) (*gust.Conn, error) {
	c, _, err := gust.Dial(context.Background(), "ws://localhost/ws", handler, &gust.DialOptions{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return held, nil // a connection you already have: a unix socket, a pipe
		},
	})
	return c, err
}

// gorilla: user, room := r.Header.Get("X-User"), r.URL.Query().Get("room")
// after Upgrade, and the read loop closed over them.
type session struct {
	user, room string
	received   int // only the callbacks touch it: no lock (unless Options.Parallel)
}

func sessionOf(c *gust.Conn) *session {
	v, _ := c.Get("session")
	return v.(*session)
}

type roomHandler struct{ gust.BuiltinEventHandler } // one for every connection

func (roomHandler) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	s := sessionOf(c)
	s.received++
	c.WriteString(fmt.Sprintf("%s in %s: message %d", s.user, s.room, s.received))
}

func roomUpgrader() *gust.Upgrader {
	return &gust.Upgrader{
		Handler: roomHandler{},
		OnRequest: func(r *http.Request, h http.Header, c *gust.Conn) error {
			c.Set("session", &session{user: r.Header.Get("X-User"), room: r.URL.Query().Get("room")})
			return nil
		},
	}
}

func serveChat(upgrader *gust.Upgrader, join func(c *gust.Conn)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return
		}
		c.WriteString("welcome") // sent now; an error ends c, and ReadLoop tells OnClose
		join(c)                  // gorilla: hub.register <- client; what c's peer sends meanwhile waits
		c.ReadLoop()             // OnOpen, then OnMessage for what came meanwhile
	}
}

type request struct {
	Method string `json:"method"`
}

type reply struct {
	OK     bool   `json:"ok"`
	Method string `json:"method"`
}

type api struct{ gust.BuiltinEventHandler }

func (api) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	var req request // gorilla: conn.ReadJSON(&req)
	if err := m.DecodeJSON(&req); err != nil {
		c.Close(gust.StatusUnsupportedData, "bad JSON")
		return
	}
	c.WriteJSON(reply{OK: true, Method: req.Method}) // gorilla: conn.WriteJSON(v)
}

func (api) OnClose(c *gust.Conn, err error) {
	switch gust.CloseStatus(err) {
	case gust.StatusNormalClosure, gust.StatusGoingAway:
		// an expected goodbye: gorilla's IsCloseError(err, 1000, 1001)
	case 0:
		// no close frame: I/O error, timeout, protocol error, panic
		log.Printf("connection lost: %v", err)
	default:
		// gorilla's IsUnexpectedCloseError(err, 1000, 1001)
		log.Printf("closed: %v", err)
	}
}

// gorilla: pongWait = 60 * time.Second, pingPeriod = pongWait * 9 / 10;
// writePump's ticker, SetReadDeadline and the pong handler all go.
func heartbeatOptions(pongWait, pingPeriod time.Duration) gust.Options {
	return gust.Options{
		PingInterval: pingPeriod,            // ping a connection silent this long
		PingTimeout:  pongWait - pingPeriod, // and cut it if still silent this long after
	}
}

// gorilla: select { case client.send <- msg: default: close(client.send) }
// in the hub, and a writePump goroutine per client.
var broadcastOptions = gust.Options{
	OutboxSize:   256,                  // gorilla: make(chan []byte, 256)
	OutboxPolicy: gust.OutboxCloseSlow, // a full outbox closes the client with 1008
}

func broadcast(conns []*gust.Conn, pm *gust.PreparedMessage) {
	for _, c := range conns {
		// Queues and returns at once: one client that stops reading fills
		// its own outbox and is closed, and delays no one.
		err := c.WritePreparedAsync(pm, nil)
		if errors.Is(err, gust.ErrSlowConsumer) {
			log.Printf("%v: too slow, closed with 1008", c.RemoteAddr()) // OnClose follows
		} // else nil, or net.ErrClosed for one closing or gone: drop it in OnClose
	}
}

// gorilla's writePump: w := c.conn.NextWriter(...); w.Write(msg); then
// for each message waiting in c.send, w.Write(newline); w.Write(<-c.send).
// gust: one WriteAsync per message; those that queue up behind a write in
// progress leave with the next one, in one system call, each its own frame.
func relay(c *gust.Conn, msgs [][]byte) error {
	for _, msg := range msgs {
		if err := c.WriteAsync(gust.OpText, msg, nil); err != nil {
			return err // ErrQueueFull, or net.ErrClosed once c has ended
		}
	}
	return nil
}

// --- from lxzan/gws ---

func migrateGwsUpgrader(handler gust.Event) *gust.Upgrader {
	upgrader := &gust.Upgrader{
		Handler: handler,
		Options: gust.Options{
			Parallel:       8,       // ParallelEnabled: true, ParallelGolimit: 8
			MaxMessageSize: 1 << 20, // ReadMaxPayloadSize
			Compression: gust.CompressionOptions{
				Enabled:           true,
				NoContextTakeover: true, // ServerContextTakeover: false
			},
		},
	}
	return upgrader
}

func authenticate(r *http.Request) (string, bool) {
	user := r.URL.Query().Get("user")
	return user, user != ""
}

func migrateGwsAuthorize(upgrader *gust.Upgrader) {
	upgrader.OnRequest = func(r *http.Request, h http.Header, c *gust.Conn) error {
		user, ok := authenticate(r) // gws: ServerOption.Authorize
		if !ok {
			return &gust.HandshakeError{Status: http.StatusUnauthorized, Body: []byte("unauthorized")}
		}
		c.Set("user", user) // gws: socket.Session().Store("user", user)
		return nil
	}
	http.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered: with the 401 above when OnRequest refused
		}
		c.ReadLoop() // OnOpen sees c.Get("user")
	})
}

func migrateGwsServer(handler gust.Event) {
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: handler}}
	go func() {
		if err := srv.ListenAndServe(":8080"); !errors.Is(err, gust.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	// later, on SIGTERM: 1001 to every connection, then wait for them
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}

// --- the traps ---

type keeper struct {
	gust.BuiltinEventHandler
	out chan []byte
}

func (k keeper) OnMessage(c *gust.Conn, m *gust.Message) {
	k.out <- bytes.Clone(m.Data) // a copy: after m.Close, m.Data's bytes may hold another message
	m.Close()
}

type slowAPI struct {
	gust.BuiltinEventHandler
	lookup func(q string) string // takes a while
}

func (s slowAPI) OnMessage(c *gust.Conn, m *gust.Message) {
	q := string(m.Data) // a copy, since m is released below
	m.Close()
	go func() {
		c.WriteString(s.lookup(q)) // writes are safe from any goroutine
	}()
}

// --- from an earlier gust ---

// before, on a client:
// gust.CompressionOptions{Enabled: true, ServerMaxWindowBits: 10, ClientNoContextTakeover: true}
var clientCompression = gust.CompressionOptions{
	Enabled:           true,
	PeerWindowBits:    10,   // server_max_window_bits=10: the server's messages
	NoContextTakeover: true, // client_no_context_takeover: the client's own
}

func loggerFor(legacy *log.Logger) gust.Options {
	// before: gust.Options{ErrorLog: legacy}
	return gust.Options{Logger: slog.New(slog.NewTextHandler(legacy.Writer(), nil))}
}
