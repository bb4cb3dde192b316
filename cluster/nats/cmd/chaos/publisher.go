package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// publisher is the driver's own Hub, with its own NATS connection and
// HistoryBroker: its broker tells the run the history's epoch, and with
// -senders 0 it publishes to every topic, one goroutine per topic so that
// a topic's counters are handed over in order, recording each message in
// the ledger and where the stream stored it (Hub.Publish returns once the
// message is queued: the broker reports later).
type publisher struct {
	nc     *nats.Conn
	broker *gustnats.HistoryBroker
	hub    *hub.Hub
	watch  natsWatch
	phase  func() int
	ledger *ledger
	topics int
}

// newPublisher connects to NATS and makes (or updates) the history stream,
// keeping keep messages per topic.
func newPublisher(url string, topics int, keep int64, logPath string, g *ledger, phase func() int) (*publisher, error) {
	p := &publisher{phase: phase, ledger: g, topics: topics}
	nc, err := nats.Connect(url, append(p.watch.options(), nats.Name("chaos publisher"))...)
	if err != nil {
		return nil, fmt.Errorf("the publisher connecting to NATS at %s: %w", url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.broker, err = gustnats.NewHistory(ctx, nc, &gustnats.HistoryOptions{MaxPerTopic: keep}); err != nil {
		nc.Close()
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		nc.Close()
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(logFile, nil))
	if p.hub, err = hub.New(&hub.Options{Broker: &watchedBroker{p.broker, p.stored}, Logger: logger}); err != nil {
		nc.Close()
		return nil, err
	}
	p.nc = nc
	return p, nil
}

// run publishes rate messages a second from start until halt closes,
// round-robin over the topics: topic t's message k (from 1) is due at
// start + ((k-1)·topics + t)/rate, and a topic held up catches up at once.
func (p *publisher) run(start time.Time, rate float64, halt <-chan struct{}) {
	var wg sync.WaitGroup
	for t := range p.topics {
		wg.Go(func() {
			for k := uint64(1); ; k++ {
				due := start.Add(time.Duration(float64((k-1)*uint64(p.topics)+uint64(t)) / rate * float64(time.Second)))
				select {
				case <-halt:
					return
				case <-time.After(time.Until(due)):
				}
				p.publish(t, k)
			}
		})
	}
	wg.Wait()
}

// publish publishes topic t's message k: {"n":K,"at":MICROSECONDS}.
func (p *publisher) publish(t int, k uint64) {
	now := time.Now()
	payload := fmt.Appendf(nil, `{"n":%d,"at":%d}`, k, now.UnixMicro())
	// Recorded first: the broker may report before Publish returns.
	p.ledger.add(t, sourcePublisher, uint32(k), now, p.phase())
	if err := p.hub.Publish(topicName(t), gust.OpText, payload); err != nil {
		p.ledger.settle(t, sourcePublisher, uint32(k), hub.Position{}, err)
	}
}

// stored is the broker's report on a message.
func (p *publisher) stored(topic string, k uint64, pos hub.Position, err error) {
	t, ok := topicIndex(topic)
	if !ok || k == 0 || k >= 1<<32 {
		t = -1 // counted as unknown
	}
	p.ledger.settle(t, sourcePublisher, uint32(k), pos, err)
}

func (p *publisher) close() {
	p.hub.Close()
	p.broker.Close()
	p.nc.Close()
}

func topicName(t int) string { return "t" + strconv.Itoa(t) }

// topicIndex reads t from topicName(t).
func topicIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "t")
	if !ok {
		return 0, false
	}
	t, err := strconv.Atoi(s)
	return t, err == nil && t >= 0
}
