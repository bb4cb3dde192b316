package main

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// publisher publishes to every topic from a Hub of its own, one goroutine
// per topic so that a topic's counters are stored in order, and counts
// what Publish confirmed.
type publisher struct {
	nc    *nats.Conn
	hub   *hub.Hub
	watch natsWatch

	published, failed atomic.Uint64
	confirmed         []bitset // per topic, the counters whose Publish returned nil
	last              []uint64 // per topic, the last counter confirmed

	mu        sync.Mutex
	latencies []publishLatency
	firstErr  error
}

type publishLatency struct {
	at time.Time // when Publish was called
	d  time.Duration
}

// newPublisher connects to NATS and makes (or updates) the history stream.
func newPublisher(url string, topics int) (*publisher, error) {
	p := &publisher{confirmed: make([]bitset, topics), last: make([]uint64, topics)}
	nc, err := nats.Connect(url, append(p.watch.options(), nats.Name("chaos publisher"))...)
	if err != nil {
		return nil, fmt.Errorf("the publisher connecting to NATS at %s: %w", url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := gustnats.NewHistory(ctx, nc, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if p.hub, err = hub.New(&hub.Options{Broker: b}); err != nil {
		nc.Close()
		return nil, err
	}
	p.nc = nc
	return p, nil
}

// run publishes rate messages a second from start until end, round-robin
// over the topics: topic t's message k (from 1) is due at start +
// ((k-1)·topics + t)/rate, and a topic whose Publish was held up catches
// up at once. It returns when every topic's last due message is published,
// or stop closes.
func (p *publisher) run(start, end time.Time, rate float64, stop <-chan struct{}) {
	var wg sync.WaitGroup
	topics := len(p.confirmed)
	for t := range topics {
		wg.Go(func() {
			for k := uint64(1); ; k++ {
				due := start.Add(time.Duration(float64((k-1)*uint64(topics)+uint64(t)) / rate * float64(time.Second)))
				if !due.Before(end) {
					return
				}
				if wait := time.Until(due); wait > 0 {
					select {
					case <-time.After(wait):
					case <-stop:
						return
					}
				}
				p.publish(t, k)
			}
		})
	}
	wg.Wait()
}

func (p *publisher) publish(t int, k uint64) {
	payload := strconv.AppendUint([]byte(`{"n":`), k, 10)
	payload = append(payload, '}')
	at := time.Now()
	err := p.hub.Publish(topicName(t), gust.OpText, payload)
	d := time.Since(at)
	p.mu.Lock()
	p.latencies = append(p.latencies, publishLatency{at, d})
	if err != nil && p.firstErr == nil {
		p.firstErr = err
		log.Printf("chaos: publishing %s #%d: %v", topicName(t), k, err)
	}
	p.mu.Unlock()
	if err != nil {
		p.failed.Add(1)
		return
	}
	p.published.Add(1)
	p.confirmed[t].set(k) // this topic's goroutine alone writes these
	p.last[t] = k
}

func (p *publisher) close() {
	p.hub.Close()
	p.nc.Close()
}
