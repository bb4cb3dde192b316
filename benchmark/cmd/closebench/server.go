package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

type serverConfig struct {
	addr, control string
	netpoll, tls  bool
	hub           bool
	topics        int
	watch         string
	trace         string // a runtime trace of the Shutdown goes there, or a CPU profile if it ends in .pprof
}

// serverResult is what a server prints on stdout once Shutdown returned.
type serverResult struct {
	Conns      int64   `json:"conns"`       // connections open when the stop came
	ShutdownMS float64 `json:"shutdown_ms"` // Shutdown's duration
	CPUMS      float64 `json:"cpu_ms"`      // the process's CPU time (user and system) during Shutdown
	Blocked    int64   `json:"blocked"`     // Metrics' "blocked" events (a callback ran)
	Held       int64   `json:"held"`        // Metrics' "held" events (no callback ran)
	Records    int     `json:"records"`     // Warn records of both (one a second at most per kind)
	HeldMaxMS  float64 `json:"held_max_ms"` // the longest hold the records gave
	Message    string  `json:"message,omitempty"`
	Left       int64   `json:"left"` // connections still open after Shutdown
	Err        string  `json:"err,omitempty"`
}

// metricsCounter is a gust.Metrics that counts netpoll mode's events and
// ignores the rest.
type metricsCounter struct {
	blocked, held atomic.Int64
}

func (m *metricsCounter) Handshake(int)                              {}
func (m *metricsCounter) Opened(*gust.Conn)                          {}
func (m *metricsCounter) Closed(*gust.Conn, gust.StatusCode, string) {}
func (m *metricsCounter) Received(*gust.Conn, gust.Opcode, int, int) {}
func (m *metricsCounter) Sent(*gust.Conn, gust.Opcode, int, int)     {}
func (m *metricsCounter) Queued(*gust.Conn, int)                     {}
func (m *metricsCounter) Dropped(*gust.Conn, int)                    {}

func (m *metricsCounter) Netpoll(_ *gust.Conn, event string) {
	switch event {
	case "blocked":
		m.blocked.Add(1)
	case "held":
		m.held.Add(1)
	}
}

// heldLog is a slog.Handler that passes records on to next and keeps the
// "blocked" and "held" Warn records' longest hold and first message.
type heldLog struct {
	next slog.Handler
	mu   *sync.Mutex
	st   *heldStats
}

type heldStats struct {
	records int
	max     time.Duration
	message string
}

func (l heldLog) Enabled(ctx context.Context, lv slog.Level) bool { return l.next.Enabled(ctx, lv) }
func (l heldLog) WithAttrs(as []slog.Attr) slog.Handler {
	return heldLog{l.next.WithAttrs(as), l.mu, l.st}
}
func (l heldLog) WithGroup(g string) slog.Handler { return heldLog{l.next.WithGroup(g), l.mu, l.st} }

func (l heldLog) Handle(ctx context.Context, r slog.Record) error {
	var blocked bool
	var held time.Duration
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "event":
			blocked = a.Value.String() == "blocked" || a.Value.String() == "held"
		case "held":
			if a.Value.Kind() == slog.KindDuration {
				held = a.Value.Duration()
			}
		}
		return true
	})
	if blocked {
		l.mu.Lock()
		l.st.records++
		l.st.max = max(l.st.max, held)
		if l.st.message == "" {
			l.st.message = r.Message
		}
		l.mu.Unlock()
	}
	return l.next.Handle(ctx, r)
}

// plainApp is the handler without the Hub: it counts the connections.
type plainApp struct {
	gust.BuiltinEventHandler
	open *atomic.Int64
}

func (a plainApp) OnOpen(*gust.Conn)         { a.open.Add(1) }
func (a plainApp) OnClose(*gust.Conn, error) { a.open.Add(-1) }

// hubApp is what a chat or notifications service does with hub.Wrap: each
// connection subscribes to a topic and joins it in the presence; with
// watch "room" (examples/chat's OnOpen and OnClose) one watcher per topic
// tells the topic's connections of each change, with "each" every
// connection watches its topic itself (what examples/chat did before).
type hubApp struct {
	gust.BuiltinEventHandler
	open     *atomic.Int64
	next     *atomic.Int64 // numbers the connections
	topics   int
	watch    string
	hub      *hub.Hub
	presence *hub.LocalPresence

	lastMu    sync.Mutex
	lastEvent hub.PresenceEvent
	lastFrame *gust.PreparedMessage

	rooms    []*benchRoom // watch "room": one per topic
	stopping atomic.Bool  // set before Shutdown: rooms tell nobody (examples/chat's chat.stopping)
}

// benchRoom is examples/chat's room: the connections a topic's watcher
// tells of each change, under a lock that orders the change against a
// member's welcome.
type benchRoom struct {
	mu        sync.Mutex
	listeners map[*gust.Conn]struct{}
}

// member is what a connection of hubApp keeps in c.Set.
type member struct {
	topic, name string
	room        int
	stop        func()
}

func (a *hubApp) OnOpen(c *gust.Conn) {
	a.open.Add(1)
	i := a.next.Add(1)
	room := int(i % int64(a.topics))
	m := &member{topic: fmt.Sprintf("topic-%d", room), name: fmt.Sprintf("user-%d", i), room: room}
	c.Set("member", m)
	if err := a.hub.Subscribe(c, m.topic); err != nil {
		panic(err)
	}
	if err := a.presence.Join(m.topic, m.name); err != nil {
		panic(err)
	}
	if a.watch == "room" {
		r := a.rooms[m.room]
		r.mu.Lock()
		_ = a.presence.Members(nil, m.topic) // the welcome's list
		r.listeners[c] = struct{}{}
		r.mu.Unlock()
	}
	if a.watch == "each" {
		stop, err := a.presence.Watch(m.topic, func(e hub.PresenceEvent) {
			if e.Member != m.name {
				c.WritePreparedAsync(a.frame(e), nil)
			}
		})
		if err != nil {
			panic(err)
		}
		m.stop = stop
	}
}

func (a *hubApp) OnClose(c *gust.Conn, _ error) {
	a.open.Add(-1)
	v, _ := c.Get("member")
	m := v.(*member)
	if m.stop != nil {
		m.stop()
	}
	if a.watch == "room" {
		r := a.rooms[m.room]
		r.mu.Lock()
		delete(r.listeners, c)
		r.mu.Unlock()
	}
	a.presence.Leave(m.topic, m.name)
}

// frame returns the message telling of e, made once for all the members
// it is told to (-watch each).
func (a *hubApp) frame(e hub.PresenceEvent) *gust.PreparedMessage {
	a.lastMu.Lock()
	defer a.lastMu.Unlock()
	if a.lastFrame != nil && a.lastEvent == e {
		return a.lastFrame
	}
	pm := newPresenceFrame(e)
	a.lastEvent, a.lastFrame = e, pm
	return pm
}

// newPresenceFrame returns the message telling of e.
func newPresenceFrame(e hub.PresenceEvent) *gust.PreparedMessage {
	kind := "leave"
	if e.Joined {
		kind = "join"
	}
	b, _ := json.Marshal(map[string]string{"type": kind, "topic": e.Topic, "member": e.Member})
	pm, _ := gust.NewPreparedMessage(gust.OpText, b)
	return pm
}

// runServer serves WebSockets on cfg.addr and a control route on
// cfg.control: GET /stats answers the connections open, POST /stop calls
// Shutdown, after which the server prints its serverResult and exits.
func runServer(cfg serverConfig) error {
	m := &metricsCounter{}
	var hmu sync.Mutex
	held := &heldStats{}
	logger := slog.New(heldLog{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), &hmu, held})
	var open atomic.Int64
	var handler gust.Event = plainApp{open: &open}
	var app *hubApp
	if cfg.hub {
		h := new(hub.Hub)
		app = &hubApp{open: &open, next: new(atomic.Int64), topics: cfg.topics, watch: cfg.watch, hub: h, presence: hub.NewLocalPresence()}
		if cfg.watch == "room" {
			for i := range cfg.topics {
				r := &benchRoom{listeners: make(map[*gust.Conn]struct{})}
				app.rooms = append(app.rooms, r)
				if _, err := app.presence.Watch(fmt.Sprintf("topic-%d", i), func(e hub.PresenceEvent) {
					if app.stopping.Load() {
						return
					}
					pm := newPresenceFrame(e)
					r.mu.Lock()
					defer r.mu.Unlock()
					for c := range r.listeners {
						c.WritePreparedAsync(pm, nil)
					}
				}); err != nil {
					return err
				}
			}
		}
		if cfg.watch == "topic" {
			for i := range cfg.topics {
				topic := fmt.Sprintf("topic-%d", i)
				if _, err := app.presence.Watch(topic, func(e hub.PresenceEvent) {
					h.Publish(topic, gust.OpText, app.frame(e).Payload())
				}); err != nil {
					return err
				}
			}
		}
		handler = h.Wrap(app)
	}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: handler, Options: gust.Options{
		Netpoll: cfg.netpoll, Metrics: m, Logger: logger, OutboxPolicy: gust.OutboxCloseSlow,
	}}}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	if cfg.tls {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}

	stopped := make(chan serverResult, 1)
	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "{\"open\":%d}\n", open.Load())
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		if !stopping.CompareAndSwap(false, true) {
			http.Error(w, "stopping already", http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		go func() {
			res := serverResult{Conns: open.Load()}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var tf *os.File
			if cfg.trace != "" {
				if tf, _ = os.Create(cfg.trace); tf != nil && strings.HasSuffix(cfg.trace, ".pprof") {
					pprof.StartCPUProfile(tf)
				} else if tf != nil {
					trace.Start(tf)
				}
			}
			cpu0 := cpuTime()
			start := time.Now()
			if app != nil {
				app.stopping.Store(true) // as examples/chat's OnShutdown hook
			}
			err := srv.Shutdown(ctx)
			if tf != nil {
				trace.Stop()
				pprof.StopCPUProfile()
				tf.Close()
			}
			res.ShutdownMS = float64(time.Since(start).Microseconds()) / 1000
			res.CPUMS = float64((cpuTime() - cpu0).Microseconds()) / 1000
			if err != nil {
				res.Err = err.Error()
			}
			res.Left = open.Load()
			res.Blocked, res.Held = m.blocked.Load(), m.held.Load()
			hmu.Lock()
			res.Records, res.HeldMaxMS, res.Message = held.records, float64(held.max.Microseconds())/1000, held.message
			hmu.Unlock()
			stopped <- res
		}()
	})
	cln, err := net.Listen("tcp", cfg.control)
	if err != nil {
		return err
	}
	go http.Serve(cln, mux)
	fmt.Fprintf(os.Stderr, "server on %s (netpoll %v, tls %v, hub %v), control on %s\n", cfg.addr, cfg.netpoll, cfg.tls, cfg.hub, cfg.control)

	res := <-stopped
	if err := <-serveErr; !errors.Is(err, gust.ErrServerClosed) {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// cpuTime returns the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfSigned makes a certificate for 127.0.0.1, valid for a day.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "closebench"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
