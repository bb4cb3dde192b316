// Command pushserver is one process of a push service spread over several:
// a gust Server whose connections all join a Hub, and the Hub joined to the
// Hubs of the other processes through NATS (gustnats). One process, started
// with -publish, publishes a message (1 KiB by default) once a second with
// Hub.PublishAll: it is framed and queued for the process's own clients at
// once and sent to NATS once, and each other process's Hub delivers it to
// its clients when NATS brings it.
//
//	nats-server -a 127.0.0.1 -p 4222 &
//	go run ./cmd/pushserver -addr 127.0.0.1:8081 &
//	go run ./cmd/pushserver -addr 127.0.0.1:8082 -publish -count 30
//
// Each message's payload starts with its sequence number, 1 for the first,
// in decimal, then a space and filler up to -size bytes, so that a client
// can tell that it got every message in order (gustload -recv-only -seq).
// With -start-signal the publisher waits for SIGUSR1 before its first
// message, so that a benchmark can connect its clients first.
//
// With -topics N the clients join topics instead, t0 to t<N-1>, placed
// over -instances processes of which this is number -instance (from 0):
// this process holds a block of N/instances topics, and its k-th client
// joins the block's topic k mod N/instances, so each topic's subscribers
// all live on one process. With -publish, each process then publishes to
// its share of all N topics (those t with t mod instances == instance,
// most of them held elsewhere): -count rounds of one message to each, a
// round spread evenly over -interval, the message numbered by its round,
// so every client still gets messages 1, 2, ... one per -interval.
//
// -route selects how the Hub subscribes in NATS: interest (the default),
// the Broker as it is, a subscription per topic with local subscribers;
// or all, the Broker wrapped to show only hub.Broker's methods, so the Hub
// subscribes to every subject and NATS brings it the whole cluster's
// traffic, as every Hub did before cluster/nats routed by interest.
//
// With -debug ADDR it serves net/http/pprof there, and /debug/stats: a JSON
// object with the Hub's counters (connections, connections_max, topics
// with local subscribers, published, delivered, dropped, closed_slow,
// pending), what NATS delivered to the process (nats_in_msgs,
// nats_in_bytes) and how many of those messages were for its own topics
// (own_in: those it holds, and PublishAll's). On SIGINT or SIGTERM the
// process shuts the server down and prints the same object on stdout, with
// the counters as they were before the shutdown.
//
// scripts/bench-push-nats and scripts/bench-route-nats run several of
// these with a nats-server and gustload; see benchmark/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	_ "net/http/pprof" // served only with -debug
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// counter counts the open connections and, with -topics, subscribes each
// to its topic; the Hub's Wrap does the rest.
type counter struct {
	gust.BuiltinEventHandler
	open, peak atomic.Int64
	joiner     *joiner
}

func (c *counter) OnOpen(conn *gust.Conn) {
	n := c.open.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	c.joiner.join(conn)
}

func (c *counter) OnClose(*gust.Conn, error) { c.open.Add(-1) }

// message returns message seq: its number in decimal, a space, and filler
// up to size bytes.
func message(seq uint64, size int) []byte {
	b := strconv.AppendUint(make([]byte, 0, size), seq, 10)
	b = append(b, ' ')
	for len(b) < size {
		b = append(b, "abcdefghijklmnopqrstuvwxyz"[len(b)%26])
	}
	return b
}

// stats is what /debug/stats serves and what the process prints when it
// stops.
type stats struct {
	Addr           string `json:"addr"`
	Mode           string `json:"mode"`
	Route          string `json:"route"`
	Connections    int64  `json:"connections"`
	ConnectionsMax int64  `json:"connections_max"`
	Topics         int    `json:"topics"`
	Published      uint64 `json:"published"`
	Delivered      uint64 `json:"delivered"`
	Dropped        uint64 `json:"dropped"`
	ClosedSlow     uint64 `json:"closed_slow"`
	Pending        int64  `json:"pending"`
	NATSInMsgs     uint64 `json:"nats_in_msgs"`
	NATSInBytes    uint64 `json:"nats_in_bytes"`
	OwnIn          uint64 `json:"own_in"`
}

func main() {
	natsURL := flag.String("nats", nats.DefaultURL, "NATS server URL")
	subject := flag.String("subject", gustnats.DefaultSubject, "NATS subject prefix the Hubs share")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve WebSocket clients on")
	mode := flag.String("mode", "netpoll", "netpoll (gust.Options.Netpoll) or goroutine")
	publish := flag.Bool("publish", false, "publish: without -topics, this is the one process that sends the messages; with -topics, each process sends its share")
	size := flag.Int("size", 1024, "message size in bytes")
	interval := flag.Duration("interval", time.Second, "time between two messages (with -topics: a round's length)")
	count := flag.Uint64("count", 0, "with -publish: stop after this many messages (with -topics: rounds; 0: no end)")
	startSignal := flag.Bool("start-signal", false, "with -publish: wait for SIGUSR1 before the first message")
	queue := flag.Int("queue", 0, "outbox size per connection (0: gust's default, 256)")
	debugAddr := flag.String("debug", "", "serve net/http/pprof and /debug/stats on this address (off when empty)")
	route := flag.String("route", "interest", "interest (a NATS subscription per topic with local subscribers) or all (every subject, as before routing by interest)")
	topics := flag.Int("topics", 0, "topics t0..t<N-1> over the -instances processes; the clients join this process's (0: no topics, -publish uses PublishAll)")
	instances := flag.Int("instances", 1, "with -topics: the number of processes the topics are placed on")
	instance := flag.Int("instance", 0, "with -topics: this process's number, 0 to -instances - 1")
	flag.Parse()
	if *size < 32 || *interval <= 0 {
		log.Fatal("pushserver: -size must be at least 32 and -interval positive")
	}
	place := placement{topics: *topics, instances: *instances, instance: *instance}
	if *topics < 0 || *instances < 1 || *instance < 0 || *instance >= *instances || *topics > 0 && *topics < *instances {
		log.Fatal("pushserver: want -topics >= 0, -instances >= 1, 0 <= -instance < -instances, and with -topics at least one topic per instance")
	}
	if *route != "interest" && *route != "all" {
		log.Fatalf("pushserver: -route %q: want interest or all", *route)
	}
	var netpoll bool
	switch *mode {
	case "netpoll":
		netpoll = true
	case "goroutine":
	default:
		log.Fatalf("pushserver: -mode %q: want netpoll or goroutine", *mode)
	}

	nc, err := nats.Connect(*natsURL, nats.Name("pushserver "+*addr), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatalf("pushserver: connecting to NATS at %s: %v", *natsURL, err)
	}
	defer nc.Close()
	var held []string
	if *topics > 0 {
		held = place.held()
	}
	rc := newRouteCounter(held)
	broker, err := newBroker(*route, gustnats.New(nc, *subject), rc)
	if err != nil {
		log.Fatalf("pushserver: %v", err)
	}
	h, err := hub.New(&hub.Options{Broker: broker})
	if err != nil {
		log.Fatalf("pushserver: %v", err)
	}
	events := &counter{joiner: &joiner{h: h, held: held}}
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: h.Wrap(events),
		Options: gust.Options{
			Netpoll:      netpoll,
			OutboxSize:   *queue,
			OutboxPolicy: gust.OutboxCloseSlow, // a client that cannot keep up is closed with 1008
		},
	}}
	var published atomic.Uint64
	snapshot := func() stats {
		st, ns := h.Stats(), nc.Stats()
		return stats{
			Addr: *addr, Mode: *mode, Route: *route, Connections: events.open.Load(), ConnectionsMax: events.peak.Load(),
			Topics: st.Topics, Published: published.Load(), Delivered: st.Delivered, Dropped: st.Dropped,
			ClosedSlow: st.ClosedSlow, Pending: st.Pending,
			NATSInMsgs: ns.InMsgs, NATSInBytes: ns.InBytes, OwnIn: rc.ownIn.Load(),
		}
	}
	if *debugAddr != "" {
		http.HandleFunc("/debug/stats", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(snapshot())
		})
		go func() { log.Print(http.ListenAndServe(*debugAddr, nil)) }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *publish {
		start := make(chan os.Signal, 1)
		if *startSignal {
			signal.Notify(start, syscall.SIGUSR1)
		} else {
			start <- syscall.SIGUSR1
		}
		go func() {
			select {
			case <-start:
			case <-ctx.Done():
				return
			}
			signal.Stop(start)
			if *topics > 0 {
				publishTopics(ctx, h, place.published(), *count, *interval, *size, &published)
				log.Printf("pushserver: published %d messages", published.Load())
				return
			}
			tick := time.NewTicker(*interval)
			defer tick.Stop()
			for seq := uint64(1); *count == 0 || seq <= *count; seq++ {
				if seq > 1 {
					select {
					case <-tick.C:
					case <-ctx.Done():
						return
					}
				}
				if err := h.PublishAll(gust.OpText, message(seq, *size)); err != nil {
					log.Printf("pushserver: message %d: %v", seq, err)
					continue
				}
				published.Store(seq)
			}
			log.Printf("pushserver: published %d messages", published.Load())
		}()
	}
	go func() {
		report := time.NewTicker(10 * time.Second)
		defer report.Stop()
		last, lastAt := h.Stats(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-report.C:
				st := h.Stats()
				log.Printf("pushserver: %d connections, %.0f deliveries/s, %d dropped, %d closed as slow, %d pending",
					events.open.Load(), float64(st.Delivered-last.Delivered)/now.Sub(lastAt).Seconds(),
					st.Dropped-last.Dropped, st.ClosedSlow-last.ClosedSlow, st.Pending)
				last, lastAt = st, now
			}
		}
	}()

	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe(*addr) }()
	log.Printf("pushserver on ws://%s/ (%s mode), NATS %s, route %s, %d of %d topics held, publish %v",
		*addr, *mode, *natsURL, *route, len(held), *topics, *publish)
	select {
	case err := <-served:
		log.Fatalf("pushserver: %v", err)
	case <-ctx.Done():
	}
	out := snapshot() // before Shutdown, whose close frames are not deliveries
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		log.Printf("pushserver: shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, gust.ErrServerClosed) {
		log.Printf("pushserver: %v", err)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
