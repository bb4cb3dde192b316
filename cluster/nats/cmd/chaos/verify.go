package main

import (
	"cmp"
	"slices"
	"time"
)

// segmentCheck is the verdict on one segment of a client: what it got of
// its topic's history in one epoch, against what the ledger was told the
// stream stored there.
type segmentCheck struct {
	due         uint64   // messages it had to get
	lost        []uint64 // of those, never received, by the phase they were made in
	firstLost   []uint64 // the first few lost, by their numbers in the ledger, for the log
	cut         uint64   // of a lost epoch, stored after the last it received: gone with the store
	muted       bool     // cut holds one stored more than grace before the store was lost
	misnumbered uint64   // received at another epoch or sequence than the stream stored it at
	unconfirmed uint64   // received, but given up by the broker (it may have been stored anyway) or never acknowledged
	lostCopies  uint64   // received in a lost epoch but stored, by the broker's report, in another after the loss: stored before the loss unreported, and again after
	foreign     uint64   // a message no source made
	spurious    bool     // ended by a reset that no loss of its epoch explains
	live        bool     // got a message after its recovered notice
	skipped     bool     // nothing to check: its epoch never named, or given up empty
}

// checkSegment checks s, a segment of a client of the topic whose
// messages l holds, against the rules:
//
//   - every message received is one the stream stored in the segment's
//     epoch, at the sequence received (else misnumbered), unless the
//     broker gave it up or its sender was never acknowledged (unconfirmed:
//     it may have been stored anyway), or it was received in an epoch
//     that was lost and reported stored in another after the loss (a copy
//     stored before the loss whose report never came: nats-server killed
//     between storing it and answering; Hub.Publish and the senders alike
//     send it again);
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
func checkSegment(s *segment, l *topicLog, lostAt map[string]time.Time, keep int64, grace time.Duration, end time.Time, phases int) segmentCheck {
	c := segmentCheck{lost: make([]uint64, phases)}
	if s.epoch == "" || s.ended && !s.endedByReset && len(s.arrivals) == 0 {
		c.skipped = true
		return c
	}
	recs := l.recs
	lost, epochLost := lostAt[s.epoch]
	var seen bitset // the numbers of the messages received
	for _, a := range s.arrivals {
		m, ok := l.number(a.src, a.k)
		if !ok {
			c.foreign++
			continue
		}
		seen.set(uint64(m))
		r := recs[m-1]
		switch {
		case r.state != sendStored:
			c.unconfirmed++
		case r.pos.Epoch == s.epoch && r.pos.Seq == uint64(a.seq):
		case r.pos.Epoch != s.epoch && epochLost && r.doneAt.After(lost):
			c.lostCopies++
		default:
			c.misnumbered++
		}
	}
	c.live = !s.recovered.IsZero() && len(s.arrivals) > s.nAtRecovered

	// The epoch's messages, in the stream's order, but those the history
	// had dropped.
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
	slices.SortFunc(msgs, func(a, b int) int { return cmp.Compare(recs[a].pos.Seq, recs[b].pos.Seq) })
	msgs = msgs[min(max(held-keep, 0), int64(len(msgs))):]

	switch {
	case !s.ended:
		for _, i := range msgs {
			c.due++
			if !seen.has(uint64(i + 1)) {
				c.miss(uint64(i+1), recs[i].phase)
			}
		}
	case !epochLost || s.endedBy == s.epoch || s.endedAt.Before(lost):
		// The history was not lost: the next segment has what follows.
		c.spurious = true
		fallthrough
	default:
		for _, i := range msgs {
			switch {
			case recs[i].pos.Seq <= s.lastSeq:
				c.due++
				if !seen.has(uint64(i + 1)) {
					c.miss(uint64(i+1), recs[i].phase)
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

// miss counts message m, made in phase, as lost.
func (c *segmentCheck) miss(m uint64, phase uint8) {
	c.lost[phase]++
	if len(c.firstLost) < 3 {
		c.firstLost = append(c.firstLost, m)
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

// stream is what the clients of a topic got of one epoch of its history:
// the message at each sequence.
type stream struct {
	at        map[uint32]arrival // by sequence
	maxSeq    uint32
	conflicts uint64 // sequences at which two clients got different messages
}

// streams is a topic's streams, by epoch.
type streams map[string]*stream

// add records a message a client got in epoch.
func (ss streams) add(epoch string, a arrival) {
	st := ss[epoch]
	if st == nil {
		st = &stream{at: make(map[uint32]arrival)}
		ss[epoch] = st
	}
	if prev, ok := st.at[a.seq]; !ok {
		st.at[a.seq] = a
	} else if prev != a {
		st.conflicts++
	}
	st.maxSeq = max(st.maxSeq, a.seq)
}

// of returns source src's messages in st, in the stream's order.
func (st *stream) of(src uint32) []arrival {
	var out []arrival
	for _, a := range st.at {
		if a.src == src {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b arrival) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// senderCheck is the verdict on one sender's messages: what it was told
// (the acknowledgements) against what its topic's clients got (the
// streams).
type senderCheck struct {
	sent, acked, unacked uint64
	resent, writes       uint64 // messages written more than once; the writes past each one's first
	resentDup            uint64 // resent, and acknowledged at the position of an earlier attempt's copy
	resentStored         uint64 // resent, and stored by a resend: no earlier attempt was
	waited               uint64 // made while the sender was not connected
	waitMax              time.Duration
	outOfOrder           uint64 // acknowledged at a position before a message sent before it, or after it in an epoch's stream
	duplicated           uint64 // in the stream of the epoch it was acknowledged in at another position too
	missing              uint64 // acknowledged at a position where the clients got another message, or nothing in an epoch kept
	gone                 uint64 // acknowledged in an epoch whose store was lost, past the last message a client got of it
	lostCopies           uint64 // in a lost epoch, not acknowledged there: stored again after the loss
	strays               uint64 // in an epoch neither its acknowledgement's nor one lost before it
	unknownEpoch         uint64 // acknowledged in an epoch the run never saw
}

// checkSender checks s's messages, against the rules: every message it
// made was acknowledged; a message sent after another is acknowledged at
// a later position (epochs ranked as the run saw them), and comes after it
// in the stream of each epoch; a message acknowledged at a position is the
// one the clients got there, and is nowhere else in that epoch's stream;
// elsewhere only as a copy in an epoch lost before it (stored before the
// loss, its acknowledgement lost with the store or the instance); at its
// position in a lost epoch, nothing only if the clients got nothing that
// far (gone with the store). Its topic's streams are st, the epochs' ranks
// rank, the epochs lost lostAt.
func checkSender(s *sender, st streams, rank map[string]int, lostAt map[string]time.Time) senderCheck {
	var c senderCheck
	n := uint64(len(s.msgs))
	c.sent = n
	type key struct {
		rank int
		seq  uint64
	}
	var prev key
	ordered := false
	for i, m := range s.msgs {
		if !m.first.IsZero() && m.first.Sub(m.made) > time.Millisecond {
			c.waited++
			c.waitMax = max(c.waitMax, m.first.Sub(m.made))
		}
		if m.attempts > 1 {
			c.resent++
			c.writes += uint64(m.attempts - 1)
		}
		if m.ackedOn == 0 {
			c.unacked++
			continue
		}
		c.acked++
		r, ok := rank[m.pos.Epoch]
		if !ok {
			c.unknownEpoch++
			continue
		}
		k := key{r, m.pos.Seq}
		if ordered && (k.rank < prev.rank || k.rank == prev.rank && k.seq <= prev.seq) {
			c.outOfOrder++
		}
		prev, ordered = k, true

		_, lost := lostAt[m.pos.Epoch]
		es := st[m.pos.Epoch]
		var a arrival
		got := false
		if es != nil {
			a, got = es.at[uint32(m.pos.Seq)]
		}
		switch {
		case got && a.src == s.src && a.k == uint32(i+1):
			if m.attempts > 1 && uint16(a.attempt) < m.ackedOn {
				c.resentDup++
			}
			if m.attempts > 1 && a.attempt > 1 {
				c.resentStored++
			}
		case !got && lost && (es == nil || m.pos.Seq > uint64(es.maxSeq)):
			c.gone++
		default:
			c.missing++
		}
	}
	for epoch, es := range st {
		_, lost := lostAt[epoch]
		r, known := rank[epoch]
		maxK := uint32(0)
		for _, a := range es.of(s.src) {
			if a.k < maxK {
				c.outOfOrder++
			}
			maxK = max(maxK, a.k)
			if a.k == 0 || uint64(a.k) > n {
				c.strays++
				continue
			}
			m := s.msgs[a.k-1]
			ackRank, acked := rank[m.pos.Epoch]
			switch {
			case m.ackedOn == 0 && lost:
				c.lostCopies++
			case m.ackedOn == 0:
				c.strays++
			case m.pos.Epoch == epoch && m.pos.Seq == uint64(a.seq):
			case m.pos.Epoch == epoch:
				c.duplicated++
			case lost && known && acked && r < ackRank:
				c.lostCopies++
			default:
				c.strays++
			}
		}
	}
	return c
}
