package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// sentResult is what the senders sent and were told, checked against what
// their topics' clients got: counted from the sender's side.
type sentResult struct {
	Senders      int     `json:"senders"`
	Sent         uint64  `json:"sent"` // messages made
	Acked        uint64  `json:"acked"`
	Unacked      uint64  `json:"unacked"` // not acknowledged at the end
	Resent       uint64  `json:"resent"`  // messages written more than once
	Writes       uint64  `json:"resent_writes"`
	ResentDup    uint64  `json:"resent_acked_as_duplicates"` // acknowledged at an earlier attempt's position
	ResentStored uint64  `json:"resent_stored_by_a_resend"`  // no earlier attempt was stored
	Waited       uint64  `json:"made_disconnected"`          // made while its sender was not connected
	WaitMax      float64 `json:"made_disconnected_wait_max_ms"`
	OutOfOrder   uint64  `json:"out_of_order"`
	Duplicated   uint64  `json:"duplicated"`
	Missing      uint64  `json:"missing"`
	Gone         uint64  `json:"gone_with_store"`   // acknowledged, then its epoch's store lost
	LostCopies   uint64  `json:"lost_epoch_copies"` // stored unacknowledged in a lost epoch, and again after
	Strays       uint64  `json:"strays"`
	UnknownEpoch uint64  `json:"unknown_epoch"`
	OddAcks      uint64  `json:"odd_acks"` // acknowledgements of nothing sent, or of one acknowledged elsewhere
	AckP50       float64 `json:"ack_p50_ms"`
	AckP99       float64 `json:"ack_p99_ms"`
	AckMax       float64 `json:"ack_max_ms"`
	// Senders with something wrong: a message not acknowledged, out of
	// order, duplicated, missing or astray.
	SendersUnacked int `json:"senders_with_unacked"`
	SendersWrong   int `json:"senders_wrong"`
}

// sentResults checks every sender against the streams its topic's clients
// got (obs, per topic), and fills in res.Sent, the ack latencies (from the
// first write of a message to its acknowledgement, by the phase it was
// made in) and the publish-to-delivery latencies (deliveries: per phase
// received in, in µs).
func (r *runner) sentResults(res *result, obs []streams, deliveries [][]uint32) {
	np := len(r.phases)
	var all []uint32
	for i, ds := range deliveries {
		slices.Sort(ds)
		p := &res.Phases[i]
		p.DeliveryP50, p.DeliveryP99, p.DeliveryMax = usPercentile(ds, 50), usPercentile(ds, 99), usPercentile(ds, 100)
		all = append(all, ds...)
	}
	slices.Sort(all)
	res.DeliveryP50, res.DeliveryP99, res.DeliveryMax = usPercentile(all, 50), usPercentile(all, 99), usPercentile(all, 100)
	for _, st := range obs {
		for _, es := range st {
			res.StreamConflicts += es.conflicts
		}
	}
	if len(r.senders) == 0 {
		return
	}
	rank := make(map[string]int)
	for i, e := range r.epochs {
		rank[e] = i
	}
	sr := &sentResult{Senders: len(r.senders)}
	var acks []time.Duration
	phaseAcks := make([][]time.Duration, np)
	for _, cl := range r.senders {
		cl.mu.Lock()
		s := cl.snd
		c := checkSender(s, obs[s.topic], rank, r.lostAt)
		for _, m := range s.msgs {
			res.Phases[m.phase].Sent++
			if m.attempts > 1 {
				res.Phases[m.phase].Resent++
			}
			if m.ackedOn != 0 {
				d := m.ackAt.Sub(m.first)
				acks = append(acks, d)
				phaseAcks[m.phase] = append(phaseAcks[m.phase], d)
			}
		}
		sr.OddAcks += s.odd
		cl.mu.Unlock()
		sr.Sent += c.sent
		sr.Acked += c.acked
		sr.Unacked += c.unacked
		sr.Resent += c.resent
		sr.Writes += c.writes
		sr.ResentDup += c.resentDup
		sr.ResentStored += c.resentStored
		sr.Waited += c.waited
		sr.WaitMax = max(sr.WaitMax, ms(c.waitMax))
		sr.OutOfOrder += c.outOfOrder
		sr.Duplicated += c.duplicated
		sr.Missing += c.missing
		sr.Gone += c.gone
		sr.LostCopies += c.lostCopies
		sr.Strays += c.strays
		sr.UnknownEpoch += c.unknownEpoch
		if c.unacked > 0 {
			sr.SendersUnacked++
		}
		if c.outOfOrder+c.duplicated+c.missing+c.strays+c.unknownEpoch > 0 {
			sr.SendersWrong++
			r.logOdd(fmt.Sprintf("sender %s (%s): %d out of order, %d duplicated, %d missing, %d astray, %d in an unknown epoch",
				s.name, topicName(s.topic), c.outOfOrder, c.duplicated, c.missing, c.strays, c.unknownEpoch))
		}
	}
	slices.Sort(acks)
	sr.AckP50, sr.AckP99, sr.AckMax = ms(percentile(acks, 50)), ms(percentile(acks, 99)), ms(percentile(acks, 100))
	for i, ds := range phaseAcks {
		slices.Sort(ds)
		p := &res.Phases[i]
		p.AckP50, p.AckP99, p.AckMax = ms(percentile(ds, 50)), ms(percentile(ds, 99)), ms(percentile(ds, 100))
	}
	res.Sent = sr
}

// judgeSent adds the senders' failures.
func (res *result) judgeSent(fail func(cond bool, format string, args ...any)) {
	fail(res.StreamConflicts > 0, "%d positions at which two clients got different messages", res.StreamConflicts)
	sr := res.Sent
	if sr == nil {
		return
	}
	fail(sr.Sent == 0, "the senders sent nothing")
	fail(sr.Unacked > 0, "%d messages of %d senders never acknowledged", sr.Unacked, sr.SendersUnacked)
	fail(sr.OutOfOrder > 0, "%d senders' messages out of their order", sr.OutOfOrder)
	fail(sr.Duplicated > 0, "%d senders' messages stored twice", sr.Duplicated)
	fail(sr.Missing > 0, "%d senders' messages not at the position acknowledged", sr.Missing)
	fail(sr.Strays > 0, "%d copies of senders' messages in an epoch they were not acknowledged in", sr.Strays)
	fail(sr.UnknownEpoch > 0, "%d senders' messages acknowledged in an epoch the run never saw", sr.UnknownEpoch)
	fail(sr.OddAcks > 0, "%d acknowledgements of nothing sent, or at a second position", sr.OddAcks)
}

// sentMarkdown writes the senders' rows of the totals table.
func (res *result) sentMarkdown(row func(k, v string), bold func(uint64) string) {
	sr := res.Sent
	if sr == nil {
		return
	}
	row("senders (clients that send to their topic through their instance: Hub.PublishOnce, an ack each)",
		fmt.Sprintf("%d, %.1f messages a second each", sr.Senders, res.Rate/float64(sr.Senders)))
	row("sent / acknowledged / **not acknowledged at the end**", fmt.Sprintf("%s / %s / %s", commas(sr.Sent), commas(sr.Acked), bold(sr.Unacked)))
	row("**per sender: out of order / duplicated / not at the position acknowledged**",
		fmt.Sprintf("%s / %s / %s", bold(sr.OutOfOrder), bold(sr.Duplicated), bold(sr.Missing)))
	row("copies astray / acknowledgements of nothing sent", fmt.Sprintf("%d / %d", sr.Strays, sr.OddAcks))
	row("resent (messages; writes) / acknowledged as duplicates (an earlier copy's position) / stored by a resend",
		fmt.Sprintf("%s; %s / %s / %s", commas(sr.Resent), commas(sr.Writes), commas(sr.ResentDup), commas(sr.ResentStored)))
	row("acknowledged, then gone with the store / stored unacknowledged in a lost epoch and again after",
		fmt.Sprintf("%s / %s", commas(sr.Gone), commas(sr.LostCopies)))
	row("made while its sender was disconnected (longest wait for a connection)", fmt.Sprintf("%s (%s)", commas(sr.Waited), msStr(sr.WaitMax)))
	row("**ack latency** (first write to its acknowledgement) p50 / p99 / max",
		fmt.Sprintf("**%s / %s** / %s", msStr(sr.AckP50), msStr(sr.AckP99), msStr(sr.AckMax)))
}

// sentPhaseRows writes the senders' rows of the phases table.
func (res *result) sentPhaseRows(line func(name string, f func(p phaseResult) string)) {
	if res.Sent != nil {
		line("sent / resent (by the phase made in)", func(p phaseResult) string { return fmt.Sprintf("%s / %s", commas(p.Sent), commas(p.Resent)) })
		line("ack latency p50 / p99 / max (by the phase made in)", func(p phaseResult) string {
			return orDash(p.Sent > 0, fmt.Sprintf("%s / %s / %s", msStr(p.AckP50), msStr(p.AckP99), msStr(p.AckMax)))
		})
	}
	line("publish-to-delivery latency p50 / p99 / max (by the phase received in)", func(p phaseResult) string {
		return orDash(p.DeliveryMax > 0, fmt.Sprintf("%s / %s / %s", msStr(p.DeliveryP50), msStr(p.DeliveryP99), msStr(p.DeliveryMax)))
	})
}

// sentSummary is the senders' part of the log's last line.
func (res *result) sentSummary() string {
	var b strings.Builder
	if sr := res.Sent; sr != nil {
		fmt.Fprintf(&b, "; senders: %d sent, %d acknowledged, %d not, %d resent (%d acknowledged as duplicates), out of order %d, duplicated %d, missing %d; ack p50 %.1f ms, p99 %.1f ms",
			sr.Sent, sr.Acked, sr.Unacked, sr.Resent, sr.ResentDup, sr.OutOfOrder, sr.Duplicated, sr.Missing, sr.AckP50, sr.AckP99)
	}
	fmt.Fprintf(&b, "; delivery p50 %.1f ms, p99 %.1f ms", res.DeliveryP50, res.DeliveryP99)
	return b.String()
}

// usPercentile is percentile for sorted microseconds, in milliseconds.
func usPercentile(sorted []uint32, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := max(int(math.Ceil(p/100*float64(len(sorted))))-1, 0)
	return float64(sorted[i]) / 1000
}
