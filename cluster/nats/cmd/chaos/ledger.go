package main

import (
	"log"
	"slices"
	"sync"
	"time"

	"github.com/gustws/gust/hub"
)

// What became of a message published, as the driver knows it.
const (
	sendPending = iota // not reported (the publisher's) or not acknowledged (a sender's) yet
	sendStored         // the stream stored it: pos says where
	sendFailed         // Publish refused it, or the broker gave it up (it may have been stored anyway)
)

// sendRecord is one message of the run: topic t's message m is
// topics[t].recs[m-1], numbered in the order the driver made them.
type sendRecord struct {
	at     time.Time // made: handed to Hub.Publish, or written by a sender the first time or not
	doneAt time.Time // stored or given up (the broker's report, a sender's acknowledgement)
	pos    hub.Position
	src    uint32 // sourcePublisher, or a sender's source number
	k      uint32 // its number among its source's messages to the topic, from 1
	state  uint8
	phase  uint8 // the phase it was made in
}

// sourcePublisher is the publisher's source number; sender s's is s+1.
const sourcePublisher = 0

// ledger is what the driver knows of every message published in the run,
// by the publisher or by a sender: per topic, in the order they were made,
// with where the stream stored each once the broker (the publisher's) or
// an acknowledgement (a sender's) told it.
type ledger struct {
	mu       sync.Mutex
	topics   []topicLog
	waiting  int // made, not reported or acknowledged
	unknown  int // reports of messages that are not the run's, or reported twice
	firstErr error
}

// topicLog is a topic's messages: message m at recs[m-1], and the number
// of each by its source and its counter there.
type topicLog struct {
	recs  []sendRecord
	byKey map[uint64]uint32 // src<<32 | k → m
}

func newLedger(topics int) *ledger {
	g := &ledger{topics: make([]topicLog, topics)}
	for t := range g.topics {
		g.topics[t].byKey = make(map[uint64]uint32)
	}
	return g
}

// number returns the number of source src's message k, if it was made.
func (l *topicLog) number(src, k uint32) (uint32, bool) {
	m, ok := l.byKey[uint64(src)<<32|uint64(k)]
	return m, ok
}

// add records source src's message k to topic t, made at at in phase, and
// returns its number.
func (g *ledger) add(t int, src, k uint32, at time.Time, phase int) uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := &g.topics[t]
	l.recs = append(l.recs, sendRecord{at: at, src: src, k: k, phase: uint8(phase)})
	m := uint32(len(l.recs))
	l.byKey[uint64(src)<<32|uint64(k)] = m
	g.waiting++
	return m
}

// settle records where source src's message k to topic t was stored, or
// that it failed (err).
func (g *ledger) settle(t int, src, k uint32, pos hub.Position, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var m uint32
	ok := t >= 0 && t < len(g.topics)
	if ok {
		m, ok = g.topics[t].number(src, k)
	}
	if !ok || g.topics[t].recs[m-1].state != sendPending {
		g.unknown++
		return
	}
	r := &g.topics[t].recs[m-1]
	r.doneAt, r.pos, r.state = time.Now(), pos, sendStored
	if err != nil {
		r.state = sendFailed
		if g.firstErr == nil {
			g.firstErr = err
			log.Printf("chaos: publishing %s #%d: %v", topicName(t), k, err)
		}
	}
	g.waiting--
}

// waitReported waits, at most d, until every message made is reported or
// acknowledged, and returns how many are not.
func (g *ledger) waitReported(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		g.mu.Lock()
		n := g.waiting
		g.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshot returns a copy of every topic's log, for the checks.
func (g *ledger) snapshot() []topicLog {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]topicLog, len(g.topics))
	for t, l := range g.topics {
		out[t] = topicLog{recs: slices.Clone(l.recs), byKey: make(map[uint64]uint32, len(l.byKey))}
		for key, m := range l.byKey {
			out[t].byKey[key] = m
		}
	}
	return out
}

// lastStored returns, per topic, the number and sequence of the message
// stored last (at the highest sequence) in epoch: 0, 0 when none.
func (g *ledger) lastStored(epoch string) (ms, seqs []uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms, seqs = make([]uint64, len(g.topics)), make([]uint64, len(g.topics))
	for t, l := range g.topics {
		for i, r := range l.recs {
			if r.state == sendStored && r.pos.Epoch == epoch && r.pos.Seq > seqs[t] {
				ms[t], seqs[t] = uint64(i+1), r.pos.Seq
			}
		}
	}
	return ms, seqs
}

// recsOf returns every topic's records, for failureWindows.
func recsOf(logs []topicLog) [][]sendRecord {
	out := make([][]sendRecord, len(logs))
	for t, l := range logs {
		out[t] = l.recs
	}
	return out
}
