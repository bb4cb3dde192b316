package main

import (
	"context"
	"fmt"
	"log"
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

// What became of a message handed to Hub.Publish.
const (
	sendPending = iota // not reported yet
	sendStored         // the stream stored it: pos says where
	sendFailed         // Publish refused it, or the broker gave it up (it may have been stored anyway)
)

// sendRecord is one message of the publisher: topic t's message k is
// records[t][k-1].
type sendRecord struct {
	at     time.Time // handed to Hub.Publish
	doneAt time.Time // stored or given up
	pos    hub.Position
	state  uint8
	phase  uint8 // the phase it was handed over in
}

// publisher publishes to every topic from a Hub of its own, one goroutine
// per topic so that a topic's counters are handed over in order, and
// records where the stream stored each message (Hub.Publish returns once
// the message is queued: the broker reports later).
type publisher struct {
	nc     *nats.Conn
	broker *gustnats.HistoryBroker
	hub    *hub.Hub
	watch  natsWatch
	phase  func() int

	mu       sync.Mutex
	records  [][]sendRecord // per topic, message k at k-1
	waiting  int            // handed over, not reported
	unknown  int            // reports of messages that are not the publisher's
	firstErr error
}

// newPublisher connects to NATS and makes (or updates) the history stream,
// keeping keep messages per topic.
func newPublisher(url string, topics int, keep int64, logPath string, phase func() int) (*publisher, error) {
	p := &publisher{records: make([][]sendRecord, topics), phase: phase}
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
	topics := len(p.records)
	for t := range topics {
		wg.Go(func() {
			for k := uint64(1); ; k++ {
				due := start.Add(time.Duration(float64((k-1)*uint64(topics)+uint64(t)) / rate * float64(time.Second)))
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

func (p *publisher) publish(t int, k uint64) {
	payload := strconv.AppendUint([]byte(`{"n":`), k, 10)
	payload = append(payload, '}')
	p.mu.Lock()
	p.records[t] = append(p.records[t], sendRecord{at: time.Now(), phase: uint8(p.phase())})
	p.waiting++
	p.mu.Unlock()
	// Recorded first: the broker may report before Publish returns.
	err := p.hub.Publish(topicName(t), gust.OpText, payload)
	if err != nil {
		p.settle(t, k, hub.Position{}, err)
	}
}

// stored is the broker's report on a message.
func (p *publisher) stored(topic string, k uint64, pos hub.Position, err error) {
	t, ok := topicIndex(topic)
	if !ok || k == 0 {
		p.mu.Lock()
		p.unknown++
		p.mu.Unlock()
		return
	}
	p.settle(t, k, pos, err)
}

func (p *publisher) settle(t int, k uint64, pos hub.Position, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t >= len(p.records) || k > uint64(len(p.records[t])) || p.records[t][k-1].state != sendPending {
		p.unknown++
		return
	}
	r := &p.records[t][k-1]
	r.doneAt, r.pos, r.state = time.Now(), pos, sendStored
	if err != nil {
		r.state = sendFailed
		if p.firstErr == nil {
			p.firstErr = err
			log.Printf("chaos: publishing %s #%d: %v", topicName(t), k, err)
		}
	}
	p.waiting--
}

// waitReported waits, at most d, until the broker has reported every
// message handed over, and returns how many it has not.
func (p *publisher) waitReported(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		p.mu.Lock()
		n := p.waiting
		p.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshot returns a copy of the records, for the checks.
func (p *publisher) snapshot() [][]sendRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]sendRecord, len(p.records))
	for t, rs := range p.records {
		out[t] = append([]sendRecord(nil), rs...)
	}
	return out
}

// lastStored returns, per topic, the counter and sequence of the last
// message stored in epoch (0, 0 when none).
func (p *publisher) lastStored(epoch string) (ks, seqs []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks, seqs = make([]uint64, len(p.records)), make([]uint64, len(p.records))
	for t, rs := range p.records {
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].state == sendStored && rs[i].pos.Epoch == epoch {
				ks[t], seqs[t] = uint64(i+1), rs[i].pos.Seq
				break
			}
		}
	}
	return ks, seqs
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
