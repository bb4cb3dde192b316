package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// instanceStats is what an instance prints when it stops.
type instanceStats struct {
	Addr           string  `json:"addr"`
	ConnectionsMax int64   `json:"connections_max"`
	Subscribed     uint64  `json:"subscribed"` // SubscribeSince calls
	Delivered      uint64  `json:"delivered"`
	Dropped        uint64  `json:"dropped"`
	ClosedSlow     uint64  `json:"closed_slow"`
	NATSDisconnect int     `json:"nats_disconnects"`
	NATSDownMax    float64 `json:"nats_down_max_ms"` // the longest time without NATS
	Warnings       int64   `json:"warnings"`         // log records at Warn or above
}

// subscriber subscribes each connection to the topic of its request from
// the sequence it asks for.
type subscriber struct {
	gust.BuiltinEventHandler
	hub        *hub.Hub
	epoch      func() string // the history's epoch, for a since without one
	open, peak atomic.Int64
	subscribed atomic.Uint64
}

// The keys under which OnRequest keeps the request's topic and since.
const (
	keyTopic = "topic"
	keySince = "since"
)

// parseRequest reads /ws?topic=T&since=N.
func parseRequest(r *http.Request, _ http.Header, c *gust.Conn) error {
	q := r.URL.Query()
	topic := q.Get("topic")
	since, err := strconv.ParseUint(q.Get("since"), 10, 64)
	if topic == "" || err != nil {
		return &gust.HandshakeError{Status: http.StatusBadRequest, Err: errors.New("want /ws?topic=T&since=N")}
	}
	c.Set(keyTopic, topic)
	c.Set(keySince, since)
	return nil
}

func (s *subscriber) OnOpen(c *gust.Conn) {
	n := s.open.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	topic, _ := c.Get(keyTopic)
	since, _ := c.Get(keySince)
	// The clients keep a sequence alone, of the history as it is now (the
	// chaos phases do not make it start over).
	pos := hub.Position{Epoch: s.epoch(), Seq: since.(uint64)}
	if pos.Seq == 0 {
		pos.Epoch = ""
	}
	if err := s.hub.SubscribeSince(c, topic.(string), pos); err != nil {
		c.Close(gust.StatusInternalError, "subscribing")
		return
	}
	s.subscribed.Add(1)
}

func (s *subscriber) OnClose(*gust.Conn, error) { s.open.Add(-1) }

// natsWatch records a NATS connection's outages.
type natsWatch struct {
	mu          sync.Mutex
	down        time.Time
	disconnects int
	longest     time.Duration
}

func (w *natsWatch) disconnected(*nats.Conn, error) {
	w.mu.Lock()
	w.disconnects++
	w.down = time.Now()
	w.mu.Unlock()
}

func (w *natsWatch) reconnected(*nats.Conn) {
	w.mu.Lock()
	if !w.down.IsZero() {
		w.longest = max(w.longest, time.Since(w.down))
		w.down = time.Time{}
	}
	w.mu.Unlock()
}

func (w *natsWatch) options() []nats.Option {
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(w.disconnected),
		nats.ReconnectHandler(w.reconnected),
	}
}

// counting is a slog.Handler that counts the records at Warn and above
// before passing them on.
type counting struct {
	slog.Handler
	warnings *atomic.Int64
}

func (h counting) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warnings.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h counting) WithAttrs(as []slog.Attr) slog.Handler {
	return counting{h.Handler.WithAttrs(as), h.warnings}
}

func (h counting) WithGroup(name string) slog.Handler {
	return counting{h.Handler.WithGroup(name), h.warnings}
}

func instanceMain(args []string) error {
	fs := flag.NewFlagSet("chaos instance", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "address to serve WebSocket clients on (port 0: any)")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS server URL")
	outbox := fs.Int("outbox", 1024, "outbox size per connection (gust.Options.OutboxSize), with OutboxCloseSlow")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var warnings atomic.Int64
	logger := slog.New(counting{slog.NewTextHandler(os.Stderr, nil), &warnings})
	slog.SetDefault(logger)

	var watch natsWatch
	nc, err := nats.Connect(*natsURL, append(watch.options(), nats.Name("chaos instance "+*addr))...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	broker, err := gustnats.NewHistory(ctx, nc, nil)
	cancel()
	if err != nil {
		return err
	}
	h, err := hub.New(&hub.Options{Broker: broker, Logger: logger})
	if err != nil {
		return err
	}
	defer h.Close()
	sub := &subscriber{hub: h, epoch: broker.Epoch}
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler:   h.Wrap(sub),
		OnRequest: parseRequest,
		Options:   gust.Options{OutboxSize: *outbox, OutboxPolicy: gust.OutboxCloseSlow, Logger: logger},
	}}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("ready %s\n", ln.Addr())

	stop, unnotify := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer unnotify()
	select {
	case err := <-served:
		return err
	case <-stop.Done():
	}
	st := h.Stats()
	watch.mu.Lock()
	out := instanceStats{
		Addr: ln.Addr().String(), ConnectionsMax: sub.peak.Load(), Subscribed: sub.subscribed.Load(),
		Delivered: st.Delivered, Dropped: st.Dropped, ClosedSlow: st.ClosedSlow,
		NATSDisconnect: watch.disconnects, NATSDownMax: ms(watch.longest), Warnings: warnings.Load(),
	}
	watch.mu.Unlock()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		logger.Warn("chaos instance: shutdown", "err", err)
	}
	<-served
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
