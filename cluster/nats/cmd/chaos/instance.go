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

// instanceStats is what an instance prints when it stops.
type instanceStats struct {
	Addr           string    `json:"addr"`
	ConnectionsMax int64     `json:"connections_max"`
	Subscribed     uint64    `json:"subscribed"` // SubscribeSince calls
	Delivered      uint64    `json:"delivered"`
	Dropped        uint64    `json:"dropped"`
	ClosedSlow     uint64    `json:"closed_slow"`
	Gaps           uint64    `json:"gaps"`   // gap notices sent, resets included
	Resets         uint64    `json:"resets"` // gap notices with reset
	NATSDisconnect int       `json:"nats_disconnects"`
	NATSDownMax    float64   `json:"nats_down_max_ms"` // the longest time without NATS
	Warnings       int64     `json:"warnings"`         // log records at Warn or above
	Beats          beatStats `json:"beats"`
	Sent           sentStats `json:"client_messages"`
}

// sentStats counts what the senders' connections sent an instance:
// messages published with Hub.PublishOnce, acknowledged (an ack queued on
// the connection), failed (not stored: the connection is closed, for the
// sender to send it again), acknowledgements for a connection that had
// closed (a copy the sender sent again elsewhere, or one a frozen instance
// published when it woke up), and connections closed for a bad sender
// name or message.
type sentStats struct {
	Received        uint64 `json:"received"`
	Acked           uint64 `json:"acked"`
	Failed          uint64 `json:"failed"`
	AcksUndelivered uint64 `json:"acks_undelivered"`
	Refused         uint64 `json:"refused"`
}

// beatStats counts what an instance published itself (-beat): handed to
// Hub.Publish, stored, given up, and stored more than a second after it
// was handed over.
type beatStats struct {
	Published uint64  `json:"published"`
	Stored    uint64  `json:"stored"`
	Failed    uint64  `json:"failed"`
	Late      uint64  `json:"stored_late"`
	StoreMax  float64 `json:"store_max_ms"`
}

// subscriber subscribes each connection to the topic of its request from
// the sequence it asks for, and publishes what a sender's connection sends
// to that topic, acknowledging each message once it is stored.
type subscriber struct {
	gust.BuiltinEventHandler
	hub        *hub.Hub
	open, peak atomic.Int64
	subscribed atomic.Uint64

	received, acked, failed, undelivered, refused atomic.Uint64
}

// The keys under which OnRequest keeps the request's topic, since and
// sender.
const (
	keyTopic  = "topic"
	keySince  = "since"
	keySender = "sender"
)

// parseRequest reads /ws?topic=T&since=EPOCH:SEQ[&sender=NAME]
// (hub.ParsePosition's form; empty: all that is kept). A connection
// without a sender only receives; OnOpen checks the name.
func parseRequest(r *http.Request, _ http.Header, c *gust.Conn) error {
	q := r.URL.Query()
	topic := q.Get("topic")
	since, err := hub.ParsePosition(q.Get("since"))
	if topic == "" || err != nil {
		return &gust.HandshakeError{Status: http.StatusBadRequest, Err: errors.New("want /ws?topic=T&since=EPOCH:SEQ")}
	}
	c.Set(keyTopic, topic)
	c.Set(keySince, since)
	if q.Has("sender") {
		c.Set(keySender, q.Get("sender"))
	}
	return nil
}

// maxSender and maxID bound a sender's name and a message's id, in bytes.
const (
	maxSender = 64
	maxID     = 64
)

// validSender tells whether name may name a sender: 1 to 64 bytes of
// printable UTF-8 without '/', so that name+"/"+id, the message's id for
// Hub.PublishOnce, names one sender's message only.
func validSender(name string) bool {
	if name == "" || len(name) > maxSender || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == '/' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func (s *subscriber) OnOpen(c *gust.Conn) {
	n := s.open.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	if name, ok := c.Get(keySender); ok && !validSender(name.(string)) {
		s.refused.Add(1)
		c.Close(gust.StatusPolicyViolation, "sender: 1 to 64 bytes of printable text without '/'")
		return
	}
	topic, _ := c.Get(keyTopic)
	since, _ := c.Get(keySince)
	if err := s.hub.SubscribeSince(c, topic.(string), since.(hub.Position)); err != nil {
		c.Close(gust.StatusInternalError, "subscribing")
		return
	}
	s.subscribed.Add(1)
}

// clientMessage is what a sender sends: its id for the message (the same
// each time it sends it again), its counter K (from 1), when it first sent
// it (Unix microseconds) and which attempt this is (from 1).
type clientMessage struct {
	ID      string `json:"id"`
	N       uint64 `json:"n"`
	At      int64  `json:"at"`
	Attempt uint64 `json:"a"`
}

// storedMessage is what the instance publishes for it: the same, with the
// sender's name, taken from the connection and not from the message.
type storedMessage struct {
	From    string `json:"from"`
	ID      string `json:"id"`
	N       uint64 `json:"n"`
	At      int64  `json:"at"`
	Attempt uint64 `json:"a"`
}

// ackMessage is the acknowledgement of a message once it is stored: its
// id and its position in the topic's history, examples/chat's form.
type ackMessage struct {
	Ack   string `json:"ack"`
	Seq   uint64 `json:"seq"`
	Epoch string `json:"epoch"`
}

// OnMessage publishes a sender's message with Hub.PublishOnce, its id the
// sender's name and the message's: stored once however many times it is
// sent within the history's duplicate window. Once stored, the ack is
// queued on the connection (WriteAsync: the broker's goroutine never
// waits); a message not stored closes the connection with 1013, so that
// the sender connects again and sends what waits, in order. A message from
// a connection without a sender, or not of the form, closes it with 1008.
func (s *subscriber) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	name, _ := c.Get(keySender)
	sender, _ := name.(string)
	var in clientMessage
	if sender == "" || m.Opcode != gust.OpText || json.Unmarshal(m.Data, &in) != nil ||
		in.ID == "" || len(in.ID) > maxID || in.N == 0 {
		s.refused.Add(1)
		c.Close(gust.StatusPolicyViolation, `want {"id":ID,"n":K,"at":MICROSECONDS,"a":ATTEMPT} from a sender`)
		return
	}
	topic, _ := c.Get(keyTopic)
	payload, err := json.Marshal(storedMessage{From: sender, ID: in.ID, N: in.N, At: in.At, Attempt: in.Attempt})
	if err != nil {
		s.refused.Add(1)
		c.Close(gust.StatusInternalError, "encoding")
		return
	}
	s.received.Add(1)
	err = s.hub.PublishOnce(topic.(string), gust.OpText, payload, sender+"/"+in.ID, func(pos hub.Position, err error) {
		if err != nil {
			s.failed.Add(1)
			go c.Close(gust.StatusTryAgainLater, "not stored: send it again")
			return
		}
		s.acked.Add(1)
		ack, _ := json.Marshal(ackMessage{Ack: in.ID, Seq: pos.Seq, Epoch: pos.Epoch})
		if c.WriteAsync(gust.OpText, ack, nil) != nil {
			s.undelivered.Add(1)
		}
	})
	if err != nil {
		s.failed.Add(1)
		c.Close(gust.StatusTryAgainLater, "not stored: send it again")
	}
}

// sent returns the counters of what senders sent.
func (s *subscriber) sent() sentStats {
	return sentStats{Received: s.received.Load(), Acked: s.acked.Load(), Failed: s.failed.Load(),
		AcksUndelivered: s.undelivered.Load(), Refused: s.refused.Load()}
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
	keep := fs.Int64("keep", 1000, "messages the history keeps per topic (gustnats.HistoryOptions.MaxPerTopic)")
	beat := fs.Duration("beat", 0, "publish {\"n\":K,\"at\":MICROSECONDS} to topic -beat-topic this often (0: never)")
	beatTopic := fs.String("beat-topic", "beat", "the topic of -beat")
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
	broker, err := gustnats.NewHistory(ctx, nc, &gustnats.HistoryOptions{MaxPerTopic: *keep})
	cancel()
	if err != nil {
		return err
	}
	var beats beatCounter
	beats.topic = *beatTopic
	h, err := hub.New(&hub.Options{Broker: &watchedBroker{broker, beats.stored}, Logger: logger})
	if err != nil {
		return err
	}
	defer h.Close()
	sub := &subscriber{hub: h}
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
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		if *beat > 0 {
			beats.run(stop, h, *beatTopic, *beat)
		}
	}()
	select {
	case err := <-served:
		return err
	case <-stop.Done():
	}
	<-beating
	st := h.Stats()
	watch.mu.Lock()
	out := instanceStats{
		Addr: ln.Addr().String(), ConnectionsMax: sub.peak.Load(), Subscribed: sub.subscribed.Load(),
		Delivered: st.Delivered, Dropped: st.Dropped, ClosedSlow: st.ClosedSlow, Gaps: st.Gaps, Resets: st.Resets,
		NATSDisconnect: watch.disconnects, NATSDownMax: ms(watch.longest), Warnings: warnings.Load(),
		Beats: beats.snapshot(), Sent: sub.sent(),
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

// beatCounter publishes an instance's beats and counts what became of
// them: a message an instance publishes just before it is frozen is sent,
// or given up, only once it runs again.
type beatCounter struct {
	topic  string
	mu     sync.Mutex
	st     beatStats
	handed []time.Time // beat K handed over at handed[K-1]
}

func (b *beatCounter) run(ctx context.Context, h *hub.Hub, topic string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for k := uint64(1); ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		b.mu.Lock()
		b.handed = append(b.handed, now)
		b.st.Published++
		b.mu.Unlock()
		payload := fmt.Appendf(nil, `{"n":%d,"at":%d}`, k, now.UnixMicro())
		if err := h.Publish(topic, gust.OpText, payload); err != nil {
			b.mu.Lock()
			b.st.Failed++
			b.mu.Unlock()
		}
	}
}

// stored is the broker's report on a message: on a beat, or else on a
// sender's message, which it ignores. A beat stored more than a
// second after it was handed over, or given up, is told on stdout for the
// driver: "late {"n":K,"handed":MICROSECONDS,"done":MICROSECONDS,"failed":BOOL}".
func (b *beatCounter) stored(topic string, k uint64, _ hub.Position, err error) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if topic != b.topic || k == 0 || k > uint64(len(b.handed)) {
		return
	}
	handed := b.handed[k-1]
	d := now.Sub(handed)
	switch {
	case err != nil:
		b.st.Failed++
	case d > time.Second:
		b.st.Stored++
		b.st.Late++
	default:
		b.st.Stored++
	}
	if err == nil {
		b.st.StoreMax = max(b.st.StoreMax, ms(d))
	}
	if err != nil || d > time.Second {
		line, _ := json.Marshal(lateBeatLine{N: k, Handed: handed.UnixMicro(), Done: now.UnixMicro(), Failed: err != nil})
		fmt.Printf("late %s\n", line)
	}
}

// lateBeatLine is a beat an instance stored late, or gave up.
type lateBeatLine struct {
	N      uint64 `json:"n"`
	Handed int64  `json:"handed"`
	Done   int64  `json:"done"`
	Failed bool   `json:"failed"`
}

func (b *beatCounter) snapshot() beatStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
