package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// result is what a run reports: the JSON object chaos run prints, and its
// Markdown table.
type result struct {
	config
	PhaseSeconds    float64 `json:"phase_seconds"`
	NATSDownSeconds float64 `json:"nats_down_seconds"`

	Published     uint64            `json:"published"`      // Publish returned nil
	PublishErrors uint64            `json:"publish_errors"` // Publish failed: stored or not
	Expected      uint64            `json:"expected"`       // per client, its topic's published messages, summed
	Delivered     uint64            `json:"delivered"`      // messages the clients received
	Lost          uint64            `json:"lost"`
	Duplicated    uint64            `json:"duplicated"`
	DupByPhase    map[string]uint64 `json:"duplicated_by_phase,omitempty"`
	OutOfOrder    uint64            `json:"out_of_order"`
	Gaps          uint64            `json:"gaps"`    // gap notices
	Foreign       uint64            `json:"foreign"` // messages of another topic, or unreadable

	Disconnects  map[string]int `json:"disconnects"` // by phase
	Disconnected int            `json:"clients_disconnected"`
	FailedDials  int            `json:"failed_dials"`
	Recoveries   int            `json:"recoveries"`
	RecoveryP50  float64        `json:"recovery_p50_ms"`
	RecoveryP99  float64        `json:"recovery_p99_ms"`
	RecoveryMax  float64        `json:"recovery_max_ms"`
	Unrecovered  int            `json:"unrecovered"` // clients not connected and recovered at the end
	Behind       int            `json:"behind"`      // clients without their topic's last message at the end

	// The longest pause between two messages, per client, by phase: p99
	// over the clients and max.
	PauseP99 map[string]float64 `json:"pause_p99_ms"`
	PauseMax map[string]float64 `json:"pause_max_ms"`

	PublishP50     float64 `json:"publish_p50_ms"`
	PublishP99     float64 `json:"publish_p99_ms"`
	PublishMax     float64 `json:"publish_max_ms"`
	PublishMaxNATS float64 `json:"publish_max_nats_ms"` // of the Publish calls that ended after the NATS stop
	PublishOver1s  int     `json:"publish_over_1s"`
	PublisherNATS  int     `json:"publisher_nats_disconnects"`
	NATSOutage     float64 `json:"nats_outage_ms"` // from the stop signal to JetStream answering again

	PerInstance []*instanceStats `json:"per_instance"` // the killed one's: null
	Seconds     float64          `json:"seconds"`      // from the first publish to the end of the drain
	Pass        bool             `json:"pass"`
	Failures    []string         `json:"failures,omitempty"`
}

// result gathers the run's counts once the clients have stopped.
func (r *runner) result(stats []*instanceStats) *result {
	cfg := r.cfg
	res := &result{
		config: cfg, PhaseSeconds: cfg.Phase.Seconds(), NATSDownSeconds: cfg.NATSDown.Seconds(),
		Published: r.pub.published.Load(), PublishErrors: r.pub.failed.Load(),
		Disconnects: make(map[string]int), DupByPhase: make(map[string]uint64), PauseP99: make(map[string]float64), PauseMax: make(map[string]float64),
		PerInstance: stats,
	}
	var recoveries []time.Duration
	var pauses [phases][]time.Duration
	for _, cl := range r.clients {
		cl.mu.Lock()
		t := &cl.tally
		confirmed := r.pub.confirmed[cl.topic]
		res.Expected += confirmed.count()
		res.Delivered += t.received
		res.Lost += t.lost(confirmed)
		res.Duplicated += t.duplicated
		res.OutOfOrder += t.outOfOrder
		res.Gaps += cl.gaps
		res.Foreign += cl.foreign
		down := 0
		for ph, n := range cl.disconnects {
			if n > 0 {
				res.Disconnects[phaseNames[ph]] += n
			}
			down += n
			pauses[ph] = append(pauses[ph], cl.maxPause[ph])
			if cl.duplicated[ph] > 0 {
				res.DupByPhase[phaseNames[ph]] += cl.duplicated[ph]
			}
		}
		if down > 0 {
			res.Disconnected++
		}
		res.FailedDials += cl.failedDials
		recoveries = append(recoveries, cl.recoveries...)
		if !cl.live || !cl.downAt.IsZero() {
			res.Unrecovered++
		}
		if t.maxCounter < r.pub.last[cl.topic] {
			res.Behind++
		}
		cl.mu.Unlock()
	}
	slices.Sort(recoveries)
	res.Recoveries = len(recoveries)
	res.RecoveryP50, res.RecoveryP99 = ms(percentile(recoveries, 50)), ms(percentile(recoveries, 99))
	res.RecoveryMax = ms(percentile(recoveries, 100))
	for ph := phaseBefore; ph < phaseDrain; ph++ {
		slices.Sort(pauses[ph])
		res.PauseP99[phaseNames[ph]] = ms(percentile(pauses[ph], 99))
		res.PauseMax[phaseNames[ph]] = ms(percentile(pauses[ph], 100))
	}

	natsStop := r.marks["nats-server stopped with SIG"+cfg.NATSSignal]
	var lat []time.Duration
	var natsMax time.Duration
	for _, l := range r.pub.latencies {
		lat = append(lat, l.d)
		if l.at.Add(l.d).After(natsStop) { // under way at the stop, or later
			natsMax = max(natsMax, l.d)
		}
		if l.d > time.Second {
			res.PublishOver1s++
		}
	}
	slices.Sort(lat)
	res.PublishP50, res.PublishP99, res.PublishMax = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100))
	res.PublishMaxNATS = ms(natsMax)
	r.pub.watch.mu.Lock()
	res.PublisherNATS = r.pub.watch.disconnects
	r.pub.watch.mu.Unlock()
	res.NATSOutage = ms(r.marks["nats-server ready again"].Sub(natsStop))
	res.Seconds = r.marks["drained"].Sub(r.marks["publishing"]).Seconds()
	res.judge()
	return res
}

// judge sets Pass and Failures: nothing lost, duplicated, out of order or
// misdelivered, no gap, every Publish confirmed, every client back and up
// to date.
func (res *result) judge() {
	fail := func(cond bool, format string, args ...any) {
		if cond {
			res.Failures = append(res.Failures, fmt.Sprintf(format, args...))
		}
	}
	fail(res.Published == 0, "nothing published")
	fail(res.PublishErrors > 0, "%d publish errors", res.PublishErrors)
	fail(res.Lost > 0, "%d messages lost", res.Lost)
	fail(res.Duplicated > 0, "%d messages duplicated", res.Duplicated)
	fail(res.OutOfOrder > 0, "%d messages out of order", res.OutOfOrder)
	fail(res.Gaps > 0, "%d gap notices", res.Gaps)
	fail(res.Foreign > 0, "%d messages of another topic or unreadable", res.Foreign)
	fail(res.Unrecovered > 0, "%d clients not recovered at the end", res.Unrecovered)
	fail(res.Behind > 0, "%d clients without their topic's last message at the end", res.Behind)
	fail(res.Disconnected == 0, "no client was disconnected: the instance kill did not happen")
	res.Pass = len(res.Failures) == 0
}

// summary is one line for the log.
func (res *result) summary() string {
	verdict := "PASS"
	if !res.Pass {
		verdict = "FAIL: " + strings.Join(res.Failures, "; ")
	}
	return fmt.Sprintf("chaos: published %d (errors %d), delivered %d of %d, lost %d, duplicated %d, out of order %d, gaps %d; recovery p50 %.0f ms, p99 %.0f ms; %s",
		res.Published, res.PublishErrors, res.Delivered, res.Expected, res.Lost, res.Duplicated, res.OutOfOrder, res.Gaps,
		res.RecoveryP50, res.RecoveryP99, verdict)
}

// markdown is the result as a table, then the instances'.
func (res *result) markdown() string {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	phase := func(m map[string]float64) string {
		return fmt.Sprintf("%s / %s / %s", msStr(m[phaseNames[phaseBefore]]), msStr(m[phaseNames[phaseInstance]]), msStr(m[phaseNames[phaseNATS]]))
	}
	b.WriteString("| | |\n|---|---:|\n")
	row("clients", fmt.Sprintf("%s over %d instances, %d topics", commas(uint64(res.Clients)), res.Instances, res.Topics))
	row("messages published (Publish returned nil)", commas(res.Published))
	row("publish errors", commas(res.PublishErrors))
	row("messages due to clients (each client, its topic's)", commas(res.Expected))
	row("messages delivered (received by clients, replays included)", commas(res.Delivered))
	row("**lost**", "**"+commas(res.Lost)+"**")
	row("**duplicated**", "**"+commas(res.Duplicated)+"**")
	row("**out of order**", "**"+commas(res.OutOfOrder)+"**")
	if res.Duplicated > 0 {
		row("duplicated, by phase", fmt.Sprint(res.DupByPhase))
	}
	row("gap notices", commas(res.Gaps))
	if res.Overlap {
		row("schedule", fmt.Sprintf("instance %d killed while nats-server was down (-overlap)", res.Kill))
	}
	row("disconnections: publishing / after the instance kill / after the NATS stop", fmt.Sprintf("%d / %d / %d",
		res.Disconnects[phaseNames[phaseBefore]], res.Disconnects[phaseNames[phaseInstance]], res.Disconnects[phaseNames[phaseNATS]]))
	row("**recovery time** p50 / p99 / max (disconnection to recovered notice)",
		fmt.Sprintf("**%s / %s** / %s", msStr(res.RecoveryP50), msStr(res.RecoveryP99), msStr(res.RecoveryMax)))
	row("recoveries / failed dials while reconnecting", fmt.Sprintf("%d / %d", res.Recoveries, res.FailedDials))
	row("clients not recovered, or without their last message, at the end", fmt.Sprintf("%d, %d", res.Unrecovered, res.Behind))
	row("longest pause between two messages, p99 over clients: publishing / after the kill / after the NATS restart", phase(res.PauseP99))
	row("the same, max", phase(res.PauseMax))
	row(fmt.Sprintf("nats-server outage (SIG%s to JetStream answering again)", res.NATSSignal), msStr(res.NATSOutage))
	row("publish latency p50 / p99 / max", fmt.Sprintf("%s / %s / %s", msStr(res.PublishP50), msStr(res.PublishP99), msStr(res.PublishMax)))
	row("publish latency max of the publishes under way at the NATS stop or later; publishes over 1 s", fmt.Sprintf("%s; %d", msStr(res.PublishMaxNATS), res.PublishOver1s))
	verdict := "**PASS**"
	if !res.Pass {
		verdict = "**FAIL**: " + strings.Join(res.Failures, "; ")
	}
	row("verdict", verdict)

	b.WriteString("\n| instance | most connections | subscriptions | delivered | dropped | closed slow | NATS disconnects | longest NATS outage | warnings |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, st := range res.PerInstance {
		if st == nil {
			fmt.Fprintf(&b, "| %d | killed (-9) | | | | | | | |\n", i)
			continue
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %d | %d | %d | %s | %d |\n", i, st.ConnectionsMax, st.Subscribed,
			commas(st.Delivered), st.Dropped, st.ClosedSlow, st.NATSDisconnect, msStr(st.NATSDownMax), st.Warnings)
	}
	return b.String()
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
