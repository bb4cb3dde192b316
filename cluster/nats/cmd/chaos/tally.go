package main

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// bitset is a set of small numbers: the counters of a topic's messages.
type bitset []uint64

func (b *bitset) set(n uint64) {
	i := int(n / 64)
	if i >= len(*b) {
		*b = slices.Grow(*b, i+1-len(*b))[:i+1]
	}
	(*b)[i] |= 1 << (n % 64)
}

func (b bitset) has(n uint64) bool {
	i := int(n / 64)
	return i < len(b) && b[i]&(1<<(n%64)) != 0
}

// count returns the number of members.
func (b bitset) count() uint64 {
	var n int
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// tally is a client's account of the messages of its topic it received:
// each has the topic sequence the history gave it and the counter its
// publisher put in it, both growing with every message.
type tally struct {
	lastSeq    uint64 // the highest sequence received: since, on a reconnect
	maxCounter uint64
	seen       bitset // the counters received
	received   uint64
	duplicated uint64 // a counter received again (under its sequence or a new one)
	outOfOrder uint64 // a sequence or a counter lower than one received before
}

// message counts the message numbered seq carrying counter n.
func (t *tally) message(seq, n uint64) {
	t.received++
	switch {
	case t.seen.has(n):
		t.duplicated++
	case seq <= t.lastSeq || n < t.maxCounter:
		t.outOfOrder++
	}
	t.seen.set(n)
	t.lastSeq = max(t.lastSeq, seq)
	t.maxCounter = max(t.maxCounter, n)
}

// lost counts the counters in confirmed (those whose Publish returned nil)
// that t never received.
func (t *tally) lost(confirmed bitset) uint64 {
	var n int
	for i, w := range confirmed {
		var s uint64
		if i < len(t.seen) {
			s = t.seen[i]
		}
		n += bits.OnesCount64(w &^ s)
	}
	return uint64(n)
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted, by the
// nearest-rank method; 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
