package main

import (
	"slices"
	"time"
)

// segmentCheck is the verdict on one segment of a client: what it got of
// its topic's history in one epoch, against what the publisher was told
// the stream stored there.
type segmentCheck struct {
	due         uint64   // messages it had to get
	lost        []uint64 // of those, never received, by the phase they were handed over in
	firstLost   []uint64 // the first few counters lost, for the log
	cut         uint64   // of a lost epoch, stored after the last it received: gone with the store
	muted       bool     // cut holds one stored more than grace before the store was lost
	misnumbered uint64   // received at another epoch or sequence than the stream stored it at
	unconfirmed uint64   // received, but given up by the broker (it may have been stored anyway)
	foreign     uint64   // a counter the publisher never handed over
	spurious    bool     // ended by a reset that no loss of its epoch explains
	live        bool     // got a message after its recovered notice
	skipped     bool     // nothing to check: its epoch never named, or given up empty
}

// checkSegment checks s, a segment of a client of the topic whose
// messages recs are, against the rules:
//
//   - every message received is one the stream stored in the segment's
//     epoch, at the sequence received (else misnumbered), unless the
//     broker gave it up (unconfirmed: it may have been stored anyway);
//   - the segment began with the history's start (the first join, or a
//     reset: all that is kept follows), so it must get every message
//     stored in its epoch but those the history had dropped when it came
//     back (past keep per topic, counted up to its recovered notice and
//     grace after);
//   - a segment the client keeps at the end must have all of them; one
//     ended by a reset into another epoch, after the store of its epoch
//     was lost (lostAt), must have them up to the last it received (the
//     ones after are gone with the store: cut), and a message cut that
//     was stored more than grace before the loss means the client was
//     muted before it; a reset that no loss explains is spurious.
func checkSegment(s *segment, recs []sendRecord, lostAt map[string]time.Time, keep int64, grace time.Duration, end time.Time, phases int) segmentCheck {
	c := segmentCheck{lost: make([]uint64, phases)}
	if s.epoch == "" || s.ended && !s.endedByReset && len(s.arrivals) == 0 {
		c.skipped = true
		return c
	}
	for _, a := range s.arrivals {
		k := uint64(a.k)
		switch {
		case k == 0 || k > uint64(len(recs)):
			c.foreign++
		case recs[k-1].state != sendStored:
			c.unconfirmed++
		case recs[k-1].pos.Epoch != s.epoch || recs[k-1].pos.Seq != uint64(a.seq):
			c.misnumbered++
		}
	}
	c.live = !s.recovered.IsZero() && s.maxK > s.kAtRecovered

	// The epoch's messages, in order, but those the history had dropped.
	by := s.recovered
	if by.IsZero() {
		by = end
		if s.ended {
			by = s.endedAt
		}
	}
	var msgs []int // indices in recs
	held := int64(0)
	for i, r := range recs {
		if r.state == sendStored && r.pos.Epoch == s.epoch {
			msgs = append(msgs, i)
			if r.doneAt.Before(by.Add(grace)) {
				held++
			}
		}
	}
	msgs = msgs[min(max(held-keep, 0), int64(len(msgs))):]

	lost, epochLost := lostAt[s.epoch]
	switch {
	case !s.ended:
		for _, i := range msgs {
			c.due++
			if !s.seen.has(uint64(i + 1)) {
				c.miss(uint64(i+1), recs[i].phase)
			}
		}
	case !epochLost || s.endedBy == s.epoch || s.endedAt.Before(lost):
		// The history was not lost: the next segment has what follows.
		c.spurious = true
		fallthrough
	default:
		for _, i := range msgs {
			k := uint64(i + 1)
			switch {
			case k <= s.maxK:
				c.due++
				if !s.seen.has(k) {
					c.miss(k, recs[i].phase)
				}
			case c.spurious:
			default:
				c.cut++
				if recs[i].doneAt.Before(lost.Add(-grace)) {
					c.muted = true
				}
			}
		}
	}
	return c
}

// miss counts counter k, handed over in phase, as lost.
func (c *segmentCheck) miss(k uint64, phase uint8) {
	c.lost[phase]++
	if len(c.firstLost) < 3 {
		c.firstLost = append(c.firstLost, k)
	}
}

// failures sums up the publishes that failed: how many, in which phase
// (the one they were handed over in), the longest time publishing kept
// failing (from a failed hand-over to the next that was stored), by the
// phase it began in, and how many failed outside the store's outages
// (from the stop to grace after JetStream answered again).
type failures struct {
	byPhase   []uint64
	windowMax []time.Duration
	longest   time.Duration
	outside   int
}

func failureWindows(recs [][]sendRecord, outages []outage, grace time.Duration, phases int) failures {
	f := failures{byPhase: make([]uint64, phases), windowMax: make([]time.Duration, phases)}
	type handed struct {
		at    time.Time
		state uint8
		phase uint8
	}
	var all []handed
	for _, rs := range recs {
		for _, r := range rs {
			if r.state != sendPending {
				all = append(all, handed{r.at, r.state, r.phase})
			}
		}
	}
	slices.SortFunc(all, func(a, b handed) int { return a.at.Compare(b.at) })
	during := func(t time.Time) bool {
		for _, o := range outages {
			if !t.Before(o.stop) && !t.After(o.ready.Add(grace)) {
				return true
			}
		}
		return false
	}
	var from time.Time
	var fromPhase uint8
	open := false
	closeWindow := func(at time.Time) {
		w := at.Sub(from)
		f.windowMax[fromPhase] = max(f.windowMax[fromPhase], w)
		f.longest = max(f.longest, w)
		open = false
	}
	for _, h := range all {
		if h.state == sendStored {
			if open {
				closeWindow(h.at)
			}
			continue
		}
		f.byPhase[h.phase]++
		if !open {
			open, from, fromPhase = true, h.at, h.phase
		}
		if !during(h.at) {
			f.outside++
		}
	}
	if open {
		closeWindow(all[len(all)-1].at)
	}
	return f
}
