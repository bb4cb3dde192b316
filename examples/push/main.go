// Command push is the classic broadcast load: it pushes a message (1 KiB by
// default) to every connected client every second, through a gust Hub.
//
//	go run ./examples/push                      # ws://127.0.0.1:8080/
//	go run ./examples/push -topics 10 -size 1024 -interval 1s -compress
//	go run ./examples/push -netpoll             # idle clients hold no goroutine (Linux)
//
// With -topics N, each connection joins one of N topics, in turn, and each
// interval the server publishes one message to each topic: every client
// still gets one message per interval, framed once per topic. Every 10
// seconds it logs the connections, the deliveries per second, and what the
// connections' outboxes dropped or closed as slow (gust.OutboxCloseSlow).
//
// Try it with gustload's receive-only mode:
//
//	cd benchmark && go run ./cmd/gustload -c 1000 -recv-only -T 30 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

type pusher struct {
	gust.BuiltinEventHandler
	hub    *hub.Hub
	topics []string
	next   atomic.Uint64 // round-robin over topics
	conns  atomic.Int64
}

func (p *pusher) OnOpen(c *gust.Conn) {
	p.conns.Add(1)
	t := p.topics[(p.next.Add(1)-1)%uint64(len(p.topics))]
	if err := p.hub.Subscribe(c, t); err != nil {
		log.Printf("push: subscribe %v: %v", c.RemoteAddr(), err)
	}
}

func (p *pusher) OnClose(*gust.Conn, error) { p.conns.Add(-1) }

// message returns a text message of exactly size bytes (at least ~60): a
// small JSON object padded with a filler field.
func message(topic string, seq uint64, size int) []byte {
	b := fmt.Appendf(nil, `{"topic":%q,"seq":%d,"time":%d,"pad":"`, topic, seq, time.Now().UnixMilli())
	for len(b) < size-2 {
		b = append(b, "abcdefghijklmnopqrstuvwxyz"[len(b)%26])
	}
	return append(b, `"}`...)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	topics := flag.Int("topics", 1, "number of topics; connections are spread over them in turn")
	size := flag.Int("size", 1024, "message size in bytes")
	interval := flag.Duration("interval", time.Second, "time between two pushes")
	compress := flag.Bool("compress", false, "offer permessage-deflate")
	queue := flag.Int("queue", 0, "outbox size per connection (0: the default, 256)")
	netpoll := flag.Bool("netpoll", false, "netpoll mode (Linux): clients wait on gust's event loops, not on a goroutine each")
	flag.Parse()
	if *topics < 1 || *size < 64 || *interval <= 0 {
		log.Fatal("push: -topics must be at least 1, -size at least 64, -interval positive")
	}

	p := &pusher{hub: new(hub.Hub)}
	for i := range *topics {
		p.topics = append(p.topics, "t"+strconv.Itoa(i))
	}
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: p.hub.Wrap(p),
		Options: gust.Options{
			Compression:  gust.CompressionOptions{Enabled: *compress},
			OutboxSize:   *queue,
			OutboxPolicy: gust.OutboxCloseSlow, // a client that cannot keep up is closed with 1008
			Netpoll:      *netpoll,
		},
	}}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		tick := time.NewTicker(*interval)
		defer tick.Stop()
		report := time.NewTicker(10 * time.Second)
		defer report.Stop()
		var seq uint64
		last, lastAt := p.hub.Stats(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				seq++
				for _, t := range p.topics {
					if err := p.hub.Publish(t, gust.OpText, message(t, seq, *size)); err != nil {
						log.Printf("push: %v", err)
					}
				}
			case now := <-report.C:
				st := p.hub.Stats()
				dt := now.Sub(lastAt).Seconds()
				log.Printf("push: %d connections, %.0f deliveries/s, %d dropped, %d closed as slow, %d pending",
					p.conns.Load(), float64(st.Delivered-last.Delivered)/dt, st.Dropped-last.Dropped,
					st.ClosedSlow-last.ClosedSlow, st.Pending)
				last, lastAt = st, now
			}
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("push on ws://%s/: %d-byte message every %v to every client, %d topic(s)", *addr, *size, *interval, *topics)
	if err := srv.ListenAndServe(*addr); !errors.Is(err, gust.ErrServerClosed) {
		log.Fatal(err)
	}
}
