package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is what a run reports: the JSON object chaos run prints, and its
// Markdown tables.
type result struct {
	config
	PhaseSeconds    float64  `json:"phase_seconds"`
	NATSDownSeconds float64  `json:"nats_down_seconds"`
	FreezeSeconds   float64  `json:"freeze_seconds"`
	GraceSeconds    float64  `json:"grace_seconds"`
	ClientPingSecs  float64  `json:"client_ping_seconds"`
	BeatSeconds     float64  `json:"beat_seconds"`
	Events          []string `json:"events"` // what the driver did, seconds from the first publish

	HandedOver    uint64   `json:"handed_over"`        // Hub.Publish calls, or messages the senders made
	Stored        uint64   `json:"stored"`             // reported stored by the broker, or acknowledged
	PublishFailed uint64   `json:"publish_failed"`     // refused, or given up by the broker (stored or not)
	Unreported    int      `json:"publish_unreported"` // no report from the broker at the end
	FailedOutside int      `json:"publish_failed_outside_outages"`
	FailWindowMax float64  `json:"publish_failing_max_ms"` // the longest time publishes kept failing
	StoreP50      float64  `json:"store_p50_ms"`           // the publisher's: from Hub.Publish to the broker's report
	StoreP99      float64  `json:"store_p99_ms"`
	StoreMax      float64  `json:"store_max_ms"`
	PublisherNATS int      `json:"publisher_nats_disconnects"`
	Epochs        []string `json:"epochs"`

	Due            uint64 `json:"due"`       // per client, the messages it had to get, summed
	Delivered      uint64 `json:"delivered"` // messages the clients received, replays included
	Lost           uint64 `json:"lost"`
	Duplicated     uint64 `json:"duplicated"`
	OutOfOrder     uint64 `json:"out_of_order"`
	Misnumbered    uint64 `json:"misnumbered"` // received at another epoch or sequence than stored at
	Unconfirmed    uint64 `json:"unconfirmed"` // received, but given up by the broker
	Gaps           uint64 `json:"gaps"`        // gap notices without reset
	Resets         uint64 `json:"resets"`      // gap notices with reset
	SpuriousResets uint64 `json:"spurious_resets"`
	EpochSwitches  uint64 `json:"epoch_switches"` // a recovered notice of another epoch without a reset
	GoneWithStore  uint64 `json:"gone_with_store"`
	Muted          int    `json:"muted"`
	Foreign        uint64 `json:"foreign"` // messages of another topic, unreadable, or never published
	// A message received in a lost epoch and reported stored in a later
	// one: stored before the loss, the broker's report of it lost.
	LostCopies      uint64 `json:"lost_epoch_copies"`
	StreamConflicts uint64 `json:"stream_conflicts"` // positions at which two clients got different messages

	// From the first send (a sender's first write, the publisher's
	// Hub.Publish) to a regular client's arrival, replays after a
	// reconnection included (the forged members, who join late, left out).
	DeliveryP50 float64     `json:"delivery_p50_ms"`
	DeliveryP99 float64     `json:"delivery_p99_ms"`
	DeliveryMax float64     `json:"delivery_max_ms"`
	Sent        *sentResult `json:"sent,omitempty"` // the senders, when there are

	Disconnected int     `json:"clients_disconnected"`
	FailedDials  int     `json:"failed_dials"`
	Recoveries   int     `json:"recoveries"`
	RecoveryP50  float64 `json:"recovery_p50_ms"`
	RecoveryP99  float64 `json:"recovery_p99_ms"`
	RecoveryMax  float64 `json:"recovery_max_ms"`
	Unrecovered  int     `json:"unrecovered"` // clients not connected and recovered at the end
	Behind       int     `json:"behind"`      // clients without their topic's last message at the end

	Phases      []phaseResult    `json:"phases"`
	Forged      []forgedResult   `json:"forged,omitempty"`
	PerInstance []*instanceStats `json:"per_instance"` // an instance killed and not started again: null
	Seconds     float64          `json:"seconds"`      // from the first publish to the end of the drain
	Pass        bool             `json:"pass"`
	Failures    []string         `json:"failures,omitempty"`
}

// phaseResult is one phase's counts: publishes by the phase they were
// handed over in, messages lost by the phase they were published in, the
// rest by the phase they happened in.
type phaseResult struct {
	Name      string  `json:"name"`
	What      string  `json:"what"`
	Seconds   float64 `json:"seconds"`
	Epoch     string  `json:"epoch"` // at its end
	LostEpoch string  `json:"lost_epoch,omitempty"`
	NewEpoch  string  `json:"new_epoch,omitempty"`
	Outage    float64 `json:"nats_outage_ms,omitempty"` // from the stop to JetStream answering again

	HandedOver uint64  `json:"handed_over"`
	Stored     uint64  `json:"stored"`
	Failed     uint64  `json:"publish_failed"`
	FailWindow float64 `json:"publish_failing_max_ms"`
	StoreP99   float64 `json:"store_p99_ms"`
	StoreMax   float64 `json:"store_max_ms"`

	Disconnects int     `json:"disconnects"`
	Recoveries  int     `json:"recoveries"`
	RecoveryP50 float64 `json:"recovery_p50_ms"`
	RecoveryP99 float64 `json:"recovery_p99_ms"`
	RecoveryMax float64 `json:"recovery_max_ms"`

	Lost       uint64 `json:"lost"`
	Duplicated uint64 `json:"duplicated"`
	OutOfOrder uint64 `json:"out_of_order"`
	Gaps       uint64 `json:"gaps"`
	Resets     uint64 `json:"resets"`

	// Phases that lose the store: regular clients told to reset into the
	// new epoch, and those that got its messages, of those due some.
	ClientsReset    int    `json:"clients_reset,omitempty"`
	ClientsNewEpoch int    `json:"clients_got_new_epoch,omitempty"`
	ClientsDue      int    `json:"clients_due_new_epoch,omitempty"`
	GoneWithStore   uint64 `json:"gone_with_store,omitempty"`
	Muted           int    `json:"muted"`

	PauseP99 float64 `json:"pause_p99_ms"` // the longest pause between two messages per regular client: p99 and max
	PauseMax float64 `json:"pause_max_ms"`

	// The senders' messages made in the phase, those resent, and their
	// ack latency; the delivery latency of those received in it.
	Sent        uint64  `json:"sent"`
	Resent      uint64  `json:"resent"`
	AckP50      float64 `json:"ack_p50_ms"`
	AckP99      float64 `json:"ack_p99_ms"`
	AckMax      float64 `json:"ack_max_ms"`
	DeliveryP50 float64 `json:"delivery_p50_ms"`
	DeliveryP99 float64 `json:"delivery_p99_ms"`
	DeliveryMax float64 `json:"delivery_max_ms"`

	LateBeats   int     `json:"late_beats"` // instances' own messages received more than a second after they were published
	LateBeatMax float64 `json:"late_beat_max_ms"`
	// Phase freeze: the instance stopped, and its own messages handed
	// over in the phase that it stored more than a second later (max) or
	// gave up.
	Frozen        int     `json:"frozen_instance,omitempty"`
	FrozenLate    int     `json:"frozen_stored_late"`
	FrozenLateMax float64 `json:"frozen_stored_late_max_ms"`
	FrozenGivenUp int     `json:"frozen_given_up"`
}

// forgedResult is the members of one kind of forged since.
type forgedResult struct {
	Kind       string `json:"kind"`
	Members    int    `json:"members"`
	ResetFirst int    `json:"reset_first"` // told to reset before anything else
	Recovered  int    `json:"recovered"`   // got their recovered notice
	Live       int    `json:"live"`        // got a live message after it
	Lost       uint64 `json:"lost"`
}

// result gathers the run's counts once the clients have stopped.
func (r *runner) result(stats []*instanceStats, unreported int) *result {
	cfg := r.cfg
	end := time.Now()
	np := len(r.phases)
	res := &result{
		config: cfg, PhaseSeconds: cfg.Phase.Seconds(), NATSDownSeconds: cfg.NATSDown.Seconds(),
		FreezeSeconds: cfg.Freeze.Seconds(), GraceSeconds: cfg.Grace.Seconds(),
		ClientPingSecs: cfg.ClientPing.Seconds(), BeatSeconds: cfg.Beat.Seconds(),
		Unreported: unreported, Epochs: r.epochs, PerInstance: stats, Phases: make([]phaseResult, np),
	}
	for _, e := range r.events {
		res.Events = append(res.Events, fmt.Sprintf("%+.1f s %s", e.at.Sub(r.phases[1].start).Seconds(), e.what))
	}
	for i, ph := range r.phases {
		p := &res.Phases[i]
		p.Name, p.What, p.Epoch, p.LostEpoch, p.NewEpoch = ph.name, r.describe(ph.name), ph.epoch, ph.lost, ph.anew
		if !ph.start.IsZero() && !ph.end.IsZero() {
			p.Seconds = ph.end.Sub(ph.start).Seconds()
		}
	}
	if i := slices.IndexFunc(r.phases, func(p *phaseInfo) bool { return p.name == "freeze" }); i >= 0 && r.frozen >= 0 {
		r.frozenLate(&res.Phases[i], r.phases[i])
	}
	for _, o := range r.outages {
		res.Phases[o.phase].Outage = ms(o.ready.Sub(o.stop))
	}

	// What was published: by the publisher, or by the senders.
	logs := r.ledger.snapshot()
	recs := recsOf(logs)
	var store []time.Duration
	phaseStore := make([][]time.Duration, np)
	for _, rs := range recs {
		for _, rec := range rs {
			res.HandedOver++
			res.Phases[rec.phase].HandedOver++
			switch rec.state {
			case sendStored:
				res.Stored++
				res.Phases[rec.phase].Stored++
				if rec.src == sourcePublisher {
					store = append(store, rec.doneAt.Sub(rec.at))
					phaseStore[rec.phase] = append(phaseStore[rec.phase], rec.doneAt.Sub(rec.at))
				}
			case sendFailed:
				res.PublishFailed++
			}
		}
	}
	slices.Sort(store)
	res.StoreP50, res.StoreP99, res.StoreMax = ms(percentile(store, 50)), ms(percentile(store, 99)), ms(percentile(store, 100))
	for i, ds := range phaseStore {
		slices.Sort(ds)
		res.Phases[i].StoreP99, res.Phases[i].StoreMax = ms(percentile(ds, 99)), ms(percentile(ds, 100))
	}
	fw := failureWindows(recs, r.outages, cfg.Grace, np)
	res.FailedOutside, res.FailWindowMax = fw.outside, ms(fw.longest)
	for i := range np {
		res.Phases[i].Failed, res.Phases[i].FailWindow = fw.byPhase[i], ms(fw.windowMax[i])
	}
	r.pub.watch.mu.Lock()
	res.PublisherNATS = r.pub.watch.disconnects
	r.pub.watch.mu.Unlock()

	// The clients.
	final := r.pub.broker.Epoch()
	_, lastSeq := r.ledger.lastStored(final)
	storedIn := make(map[string][]bool) // per epoch, per topic: anything stored there
	for _, ph := range r.phases {
		if ph.anew != "" {
			storedIn[ph.anew] = make([]bool, cfg.Topics)
			for t, rs := range recs {
				for _, rec := range rs {
					if rec.state == sendStored && rec.pos.Epoch == ph.anew {
						storedIn[ph.anew][t] = true
						break
					}
				}
			}
		}
	}
	lostIn := make(map[string]int) // the phase that lost each epoch
	for i, ph := range r.phases {
		if ph.lost != "" {
			lostIn[ph.lost] = i
		}
	}
	var recoveries []time.Duration
	phaseRecoveries := make([][]time.Duration, np)
	pauses := make([][]time.Duration, np)
	forgedBy := make(map[string]*forgedResult)
	var forgedKinds []string
	obs := make([]streams, cfg.Topics) // what the clients got, per topic and epoch
	for t := range obs {
		obs[t] = make(streams)
	}
	deliveries := make([][]uint32, np)
	for _, cl := range r.clients {
		cl.mu.Lock()
		res.Foreign += cl.foreign
		down := 0
		for i := range np {
			p := &res.Phases[i]
			p.Disconnects += cl.disconnects[i]
			down += cl.disconnects[i]
			p.Duplicated += cl.duplicated[i]
			p.OutOfOrder += cl.outOfOrder[i]
			p.Gaps += cl.gaps[i]
			if cl.kind == regular {
				pauses[i] = append(pauses[i], cl.maxPause[i])
			}
		}
		if down > 0 {
			res.Disconnected++
		}
		res.FailedDials += cl.failedDials
		for _, rc := range cl.recoveries {
			recoveries = append(recoveries, rc.d)
			phaseRecoveries[rc.phase] = append(phaseRecoveries[rc.phase], rc.d)
		}
		for _, n := range cl.resets {
			res.Phases[n.phase].Resets++
		}
		if !cl.live || !cl.downAt.IsZero() {
			res.Unrecovered++
		}
		seq := uint64(0)
		if cl.kind != watcher {
			seq = lastSeq[cl.topic]
		}
		if !cl.live || seq > 0 && (cl.seg == nil || cl.seg.epoch != final || cl.seg.lastSeq < seq) {
			res.Behind++
		}
		for _, lb := range cl.late {
			p := &res.Phases[lb.phase]
			p.LateBeats++
			p.LateBeatMax = max(p.LateBeatMax, ms(lb.d))
		}
		if cl.kind == watcher {
			cl.mu.Unlock()
			continue
		}
		for i, ds := range cl.delivery {
			deliveries[i] = append(deliveries[i], ds...)
		}

		// Its segments, against what the publisher was told.
		var clientLost uint64
		muted := make([]bool, np) // by phase
		for _, s := range cl.segs {
			res.Delivered += uint64(len(s.arrivals))
			res.EpochSwitches += s.switched
			c := checkSegment(s, &logs[cl.topic], r.lostAt, cfg.Keep, cfg.Grace, end, np)
			if c.skipped {
				continue
			}
			for _, a := range s.arrivals {
				obs[cl.topic].add(s.epoch, a)
			}
			res.LostCopies += c.lostCopies
			res.Due += c.due
			for i, n := range c.lost {
				res.Phases[i].Lost += n
				clientLost += n
			}
			if len(c.firstLost) > 0 {
				var what []string
				for _, k := range c.firstLost {
					rec := recs[cl.topic][k-1]
					what = append(what, fmt.Sprintf("#%d (seq %d, stored %s)", k, rec.pos.Seq, rec.doneAt.Format("15:04:05.000")))
				}
				r.logOdd(fmt.Sprintf("lost: client %d (%s, instance %d), its segment of epoch %s from %s (reset %v, recovered %s): %s",
					cl.id, cl.name, cl.home, s.epoch, s.began.Format("15:04:05.000"), s.reset, s.recovered.Format("15:04:05.000"), strings.Join(what, ", ")))
			}
			res.Misnumbered += c.misnumbered
			res.Unconfirmed += c.unconfirmed
			res.Foreign += c.foreign
			if c.spurious {
				res.SpuriousResets++
				r.logOdd(fmt.Sprintf("client %d (%s): a reset into epoch %q ended its segment of epoch %q at %v, which no loss explains",
					cl.id, cl.name, s.endedBy, s.epoch, s.endedAt.Format("15:04:05.000")))
			}
			if i, ok := lostIn[s.epoch]; ok && s.ended {
				res.Phases[i].GoneWithStore += c.cut
				muted[i] = muted[i] || c.muted
			}
		}
		res.Lost += clientLost
		if cl.kind == regular {
			for i, ph := range r.phases {
				if ph.anew == "" || !storedIn[ph.anew][cl.topic] {
					continue
				}
				p := &res.Phases[i]
				p.ClientsDue++
				if slices.ContainsFunc(cl.resets, func(n resetNote) bool { return n.epoch == ph.anew }) {
					p.ClientsReset++
				}
				if slices.ContainsFunc(cl.segs, func(s *segment) bool { return s.epoch == ph.anew && len(s.arrivals) > 0 }) {
					p.ClientsNewEpoch++
				} else {
					muted[i] = true
				}
			}
		}
		for i, m := range muted {
			if m {
				res.Phases[i].Muted++
			}
		}
		if slices.Contains(muted, true) {
			res.Muted++
		}
		if cl.kind == forged {
			f := forgedBy[cl.forgery]
			if f == nil {
				f = &forgedResult{Kind: cl.forgery}
				forgedBy[cl.forgery] = f
				forgedKinds = append(forgedKinds, cl.forgery)
			}
			f.Members++
			f.Lost += clientLost
			if len(cl.segs) > 0 && cl.segs[0].reset {
				f.ResetFirst++
			}
			if len(cl.segs) > 0 && !cl.segs[0].recovered.IsZero() {
				f.Recovered++
				if checkSegment(cl.segs[0], &logs[cl.topic], r.lostAt, cfg.Keep, cfg.Grace, end, np).live {
					f.Live++
				}
			}
		}
		cl.mu.Unlock()
	}
	for _, kind := range forgedKinds {
		res.Forged = append(res.Forged, *forgedBy[kind])
	}
	for i := range np {
		p := &res.Phases[i]
		res.Duplicated += p.Duplicated
		res.OutOfOrder += p.OutOfOrder
		res.Gaps += p.Gaps
		res.Resets += p.Resets
		res.GoneWithStore += p.GoneWithStore
		slices.Sort(phaseRecoveries[i])
		p.Recoveries = len(phaseRecoveries[i])
		p.RecoveryP50, p.RecoveryP99 = ms(percentile(phaseRecoveries[i], 50)), ms(percentile(phaseRecoveries[i], 99))
		p.RecoveryMax = ms(percentile(phaseRecoveries[i], 100))
		slices.Sort(pauses[i])
		p.PauseP99, p.PauseMax = ms(percentile(pauses[i], 99)), ms(percentile(pauses[i], 100))
	}
	slices.Sort(recoveries)
	res.Recoveries = len(recoveries)
	res.RecoveryP50, res.RecoveryP99 = ms(percentile(recoveries, 50)), ms(percentile(recoveries, 99))
	res.RecoveryMax = ms(percentile(recoveries, 100))
	r.sentResults(res, obs, deliveries)
	res.Seconds = r.phases[np-1].end.Sub(r.phases[1].start).Seconds()
	res.judge()
	return res
}

// frozenLate counts, in p, the frozen instance's own messages handed over
// in phase ph that it stored more than a second later, or gave up.
func (r *runner) frozenLate(p *phaseResult, ph *phaseInfo) {
	p.Frozen = r.frozen
	for _, line := range r.instances[r.frozen].linesAfter("late ") {
		var l lateBeatLine
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		handed := time.UnixMicro(l.Handed)
		if handed.Before(ph.start) || !ph.end.IsZero() && handed.After(ph.end) {
			continue
		}
		if l.Failed {
			p.FrozenGivenUp++
			continue
		}
		p.FrozenLate++
		p.FrozenLateMax = max(p.FrozenLateMax, ms(time.UnixMicro(l.Done).Sub(handed)))
	}
}

// judge sets Pass and Failures.
func (res *result) judge() {
	fail := func(cond bool, format string, args ...any) {
		if cond {
			res.Failures = append(res.Failures, fmt.Sprintf(format, args...))
		}
	}
	fail(res.Stored == 0, "nothing stored")
	fail(res.Unreported > 0, "%d messages never reported by the broker, or acknowledged", res.Unreported)
	fail(res.FailedOutside > 0, "%d publishes failed outside the store's outages (and %v after)", res.FailedOutside, res.GraceSeconds)
	fail(res.Lost > 0, "%d messages lost", res.Lost)
	fail(res.Duplicated > 0, "%d messages duplicated", res.Duplicated)
	fail(res.OutOfOrder > 0, "%d messages out of order", res.OutOfOrder)
	fail(res.Misnumbered > 0, "%d messages received at another epoch or sequence than stored at", res.Misnumbered)
	fail(res.Gaps > 0, "%d gap notices without reset", res.Gaps)
	fail(res.SpuriousResets > 0, "%d resets that no loss of the store explains", res.SpuriousResets)
	fail(res.EpochSwitches > 0, "%d recoveries into another epoch without a reset", res.EpochSwitches)
	fail(res.Muted > 0, "%d clients muted", res.Muted)
	fail(res.Foreign > 0, "%d messages of another topic, unreadable, or never published", res.Foreign)
	fail(res.Unrecovered > 0, "%d clients not recovered at the end", res.Unrecovered)
	fail(res.Behind > 0, "%d clients without their topic's last message at the end", res.Behind)
	res.judgeSent(fail)
	for _, p := range res.Phases {
		switch p.Name {
		case "kill", "burst":
			fail(p.Disconnects == 0 && !(p.Name == "kill" && res.Overlap), "phase %s: no client was disconnected", p.Name)
		case "empty", "empty-restart":
			fail(p.NewEpoch == "", "phase %s: the history did not start over", p.Name)
			fail(p.ClientsReset < p.ClientsDue, "phase %s: %d of %d clients told to reset", p.Name, p.ClientsReset, p.ClientsDue)
		}
	}
	for _, f := range res.Forged {
		fail(f.ResetFirst < f.Members || f.Recovered < f.Members || f.Live < f.Members || f.Lost > 0,
			"forged since %q: of %d members %d told to reset first, %d recovered, %d got live messages, %d messages lost",
			f.Kind, f.Members, f.ResetFirst, f.Recovered, f.Live, f.Lost)
	}
	res.Pass = len(res.Failures) == 0
}

// summary is one line for the log.
func (res *result) summary() string {
	verdict := "PASS"
	if !res.Pass {
		verdict = "FAIL: " + strings.Join(res.Failures, "; ")
	}
	return fmt.Sprintf("chaos: stored %d of %d published (failed %d), delivered %d, due %d, lost %d, duplicated %d, out of order %d, gaps %d, resets %d (spurious %d), muted %d; recovery p50 %.0f ms, p99 %.0f ms%s; %s",
		res.Stored, res.HandedOver, res.PublishFailed, res.Delivered, res.Due, res.Lost, res.Duplicated, res.OutOfOrder, res.Gaps,
		res.Resets, res.SpuriousResets, res.Muted, res.RecoveryP50, res.RecoveryP99, res.sentSummary(), verdict)
}

// markdown is the result as tables: the totals, the phases side by side,
// the forged members, the instances.
func (res *result) markdown() string {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	bold := func(n uint64) string { return "**" + commas(n) + "**" }
	b.WriteString("| | |\n|---|---:|\n")
	row("clients", fmt.Sprintf("%s over %d instances, %d topics; %d forged members", commas(uint64(res.Clients)), res.Instances, res.Topics, res.forgedMembers()))
	if res.Sent == nil {
		row("messages handed to Hub.Publish / stored / failed", fmt.Sprintf("%s / %s / %s", commas(res.HandedOver), commas(res.Stored), commas(res.PublishFailed)))
		row("longest time publishes kept failing; failed outside the store's outages", fmt.Sprintf("%s; %d", msStr(res.FailWindowMax), res.FailedOutside))
		row("store latency (Hub.Publish to the broker's report) p50 / p99 / max", fmt.Sprintf("%s / %s / %s", msStr(res.StoreP50), msStr(res.StoreP99), msStr(res.StoreMax)))
	}
	res.sentMarkdown(row, bold)
	row("**publish-to-delivery latency** (first send to a regular client's arrival, replays after reconnecting included) p50 / p99 / max",
		fmt.Sprintf("**%s / %s** / %s", msStr(res.DeliveryP50), msStr(res.DeliveryP99), msStr(res.DeliveryMax)))
	row("history epochs", fmt.Sprintf("%d (%s)", len(res.Epochs), strings.Join(res.Epochs, ", ")))
	row("messages due to clients (each, its topic's in each epoch it was in, as kept)", commas(res.Due))
	row("messages delivered (received by clients, replays included)", commas(res.Delivered))
	row("**lost**", bold(res.Lost))
	row("**duplicated**", bold(res.Duplicated))
	row("**out of order**", bold(res.OutOfOrder))
	row("received at another epoch or sequence than stored at; a copy in a lost epoch; clients disagreeing on a position",
		fmt.Sprintf("%d; %d; %d", res.Misnumbered, res.LostCopies, res.StreamConflicts))
	row("gap notices without reset / resets / resets no loss explains", fmt.Sprintf("%d / %d / %d", res.Gaps, res.Resets, res.SpuriousResets))
	row("gone with the store (stored in a lost epoch after the last a client got)", commas(res.GoneWithStore))
	row("**muted clients**", bold(uint64(res.Muted)))
	row("**recovery time** p50 / p99 / max (disconnection to recovered notice)",
		fmt.Sprintf("**%s / %s** / %s", msStr(res.RecoveryP50), msStr(res.RecoveryP99), msStr(res.RecoveryMax)))
	row("recoveries / failed dials while reconnecting", fmt.Sprintf("%d / %d", res.Recoveries, res.FailedDials))
	row("clients not recovered, or without their last message, at the end", fmt.Sprintf("%d, %d", res.Unrecovered, res.Behind))
	verdict := "**PASS**"
	if !res.Pass {
		verdict = "**FAIL**: " + strings.Join(res.Failures, "; ")
	}
	row("verdict", verdict)

	// The phases side by side (connect only when something happened in it).
	var cols []phaseResult
	for _, p := range res.Phases {
		if p.Name != "connect" || p.Disconnects > 0 || p.Duplicated > 0 || p.OutOfOrder > 0 {
			cols = append(cols, p)
		}
	}
	b.WriteString("\n| phase |")
	for _, p := range cols {
		fmt.Fprintf(&b, " %s |", p.Name)
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	line := func(name string, f func(p phaseResult) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, p := range cols {
			fmt.Fprintf(&b, " %s |", f(p))
		}
		b.WriteString("\n")
	}
	line("seconds", func(p phaseResult) string { return fmt.Sprintf("%.1f", p.Seconds) })
	line("nats-server outage (stop to JetStream answering)", func(p phaseResult) string { return orDash(p.Outage > 0, msStr(p.Outage)) })
	if res.Sent == nil {
		line("handed over / stored / failed", func(p phaseResult) string {
			return fmt.Sprintf("%s / %s / %s", commas(p.HandedOver), commas(p.Stored), commas(p.Failed))
		})
		line("longest time publishes kept failing", func(p phaseResult) string { return msStr(p.FailWindow) })
		line("store latency p99 / max", func(p phaseResult) string { return fmt.Sprintf("%s / %s", msStr(p.StoreP99), msStr(p.StoreMax)) })
	}
	res.sentPhaseRows(line)
	line("disconnections", func(p phaseResult) string { return strconv.Itoa(p.Disconnects) })
	line("recoveries: p50 / p99 / max", func(p phaseResult) string {
		return orDash(p.Recoveries > 0, fmt.Sprintf("%d: %s / %s / %s", p.Recoveries, msStr(p.RecoveryP50), msStr(p.RecoveryP99), msStr(p.RecoveryMax)))
	})
	line("**lost** (by the phase published in)", func(p phaseResult) string { return bold(p.Lost) })
	line("**duplicated** / **out of order**", func(p phaseResult) string { return bold(p.Duplicated) + " / " + bold(p.OutOfOrder) })
	line("gaps without reset / resets", func(p phaseResult) string { return fmt.Sprintf("%d / %d", p.Gaps, p.Resets) })
	line("clients told to reset / that got the new epoch's messages, of", func(p phaseResult) string {
		return orDash(p.ClientsDue > 0, fmt.Sprintf("%d / %d of %d", p.ClientsReset, p.ClientsNewEpoch, p.ClientsDue))
	})
	line("gone with the store", func(p phaseResult) string { return orDash(p.LostEpoch != "", commas(p.GoneWithStore)) })
	line("**muted clients**", func(p phaseResult) string { return bold(uint64(p.Muted)) })
	line("longest pause between two messages, p99 / max over clients", func(p phaseResult) string {
		return fmt.Sprintf("%s / %s", msStr(p.PauseP99), msStr(p.PauseMax))
	})
	line("instances' own messages reaching a client > 1 s after published (max)", func(p phaseResult) string {
		return orDash(p.LateBeats > 0, fmt.Sprintf("%d (%s)", p.LateBeats, msStr(p.LateBeatMax)))
	})
	line("the frozen instance's own messages stored > 1 s after published (max) / given up", func(p phaseResult) string {
		return orDash(p.Name == "freeze", fmt.Sprintf("%d (%s) / %d", p.FrozenLate, msStr(p.FrozenLateMax), p.FrozenGivenUp))
	})
	b.WriteString("\nPhases: ")
	for i, p := range cols {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "**%s**, %s", p.Name, p.What)
	}
	b.WriteString(".\n\nWhat the driver did, in seconds from the first publish: ")
	b.WriteString(strings.Join(res.Events, "; "))
	b.WriteString(".\n")

	if len(res.Forged) > 0 {
		b.WriteString("\n| forged since | members | told to reset first | recovered | got live messages after | lost |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|\n")
		for _, f := range res.Forged {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d |\n", f.Kind, f.Members, f.ResetFirst, f.Recovered, f.Live, f.Lost)
		}
	}

	b.WriteString("\n| instance | most connections | subscriptions | delivered | dropped | closed slow | gaps / resets sent | NATS disconnects | longest NATS outage | own messages: stored / failed / stored > 1 s late (max) | senders' messages: received / acknowledged / failed / acks to a closed connection / refused | warnings |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, st := range res.PerInstance {
		if st == nil {
			fmt.Fprintf(&b, "| %d | killed (-9) | | | | | | | | | | |\n", i)
			continue
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %d | %d | %d / %d | %d | %s | %d / %d / %d (%s) | %s / %s / %d / %d / %d | %d |\n", i, st.ConnectionsMax, st.Subscribed,
			commas(st.Delivered), st.Dropped, st.ClosedSlow, st.Gaps, st.Resets, st.NATSDisconnect, msStr(st.NATSDownMax),
			st.Beats.Stored, st.Beats.Failed, st.Beats.Late, msStr(st.Beats.StoreMax),
			commas(st.Sent.Received), commas(st.Sent.Acked), st.Sent.Failed, st.Sent.AcksUndelivered, st.Sent.Refused, st.Warnings)
	}
	return b.String()
}

func (res *result) forgedMembers() int {
	n := 0
	for _, f := range res.Forged {
		n += f.Members
	}
	return n
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

func orDash(ok bool, s string) string {
	if !ok {
		return "–"
	}
	return s
}

func msStr(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// commas writes n with thousands separators.
func commas(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
