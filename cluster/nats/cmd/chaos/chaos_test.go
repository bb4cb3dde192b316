package main

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
)

// A segment tells duplicates (a counter again, under its sequence or a
// new one) from messages out of order (a lower sequence or counter).
func TestSegmentMessage(t *testing.T) {
	var s segment
	type verdict struct{ dup, ooo bool }
	for _, m := range []struct {
		seq, k uint64
		want   verdict
	}{
		{3, 1, verdict{}},
		{7, 2, verdict{}},
		{7, 2, verdict{dup: true}},  // the same message again
		{9, 2, verdict{dup: true}},  // stored twice
		{8, 4, verdict{ooo: true}},  // a lower sequence
		{12, 3, verdict{ooo: true}}, // a lower counter
		{13, 6, verdict{}},
	} {
		dup, ooo := s.message(m.seq, sourcePublisher, uint32(m.k), 0)
		require.Equal(t, m.want, verdict{dup, ooo}, "seq %d #%d", m.seq, m.k)
	}
	require.Len(t, s.arrivals, 7)
	require.Equal(t, uint64(13), s.lastSeq)
	require.Equal(t, uint32(6), s.bySrc[sourcePublisher].maxK)

	// Each source keeps its own order: a lower counter of another source
	// is not out of order, the same counter of another is no duplicate.
	dup, ooo := s.message(14, 1, 2, 1)
	require.False(t, dup || ooo)
	dup, ooo = s.message(15, 1, 1, 1)
	require.Equal(t, verdict{ooo: true}, verdict{dup, ooo}, "sender 1's #1 after its #2")
	dup, ooo = s.message(16, 1, 2, 2)
	require.Equal(t, verdict{dup: true}, verdict{dup, ooo}, "sender 1's #2 again, a second attempt stored")
}

// history makes a topic's records: the publisher's counters
// 1..len(epochs), stored in epochs[k-1] ("" for failed), one a second from
// t0, seq k in each epoch counted from its first.
func history(t0 time.Time, epochs ...string) []sendRecord {
	recs := make([]sendRecord, len(epochs))
	seq := map[string]uint64{}
	for i, e := range epochs {
		at := t0.Add(time.Duration(i) * time.Second)
		recs[i] = sendRecord{at: at, doneAt: at.Add(time.Millisecond), phase: uint8(i % 3), src: sourcePublisher, k: uint32(i + 1)}
		if e == "" {
			recs[i].state = sendFailed
			continue
		}
		seq[e]++
		recs[i].state, recs[i].pos = sendStored, hub.Position{Epoch: e, Seq: seq[e]}
	}
	return recs
}

// logOf makes the topic log of recs.
func logOf(recs []sendRecord) *topicLog {
	l := &topicLog{recs: recs, byKey: make(map[uint64]uint32)}
	for i, r := range recs {
		l.byKey[uint64(r.src)<<32|uint64(r.k)] = uint32(i + 1)
	}
	return l
}

// got makes a segment of epoch that received the publisher's counters ks
// of recs, at the sequence they were stored at (or seq 1 when not
// stored), its recovered notice when ks[recovered] was stored (-1: none).
func got(epoch string, recs []sendRecord, recovered int, ks ...uint64) *segment {
	s := &segment{epoch: epoch}
	for i, k := range ks {
		if i == recovered {
			s.recovered, s.nAtRecovered = recs[k-1].doneAt, len(s.arrivals)
		}
		s.message(max(recs[k-1].pos.Seq, 1), sourcePublisher, uint32(k), 0)
	}
	return s
}

func TestCheckSegment(t *testing.T) {
	t0 := time.Unix(1000, 0)
	end := t0.Add(time.Hour)
	grace := 3 * time.Second
	// Epoch A: counters 1-5, 6 failed, then B (A lost at t0+6.5s): 7-10.
	recs := history(t0, "A", "A", "A", "A", "A", "", "B", "B", "B", "B")
	tl := logOf(recs)
	lostAt := map[string]time.Time{"A": t0.Add(6500 * time.Millisecond)}
	sum := func(v []uint64) (n uint64) {
		for _, x := range v {
			n += x
		}
		return n
	}

	t.Run("kept to the end, complete", func(t *testing.T) {
		c := checkSegment(got("B", recs, 1, 7, 8, 9, 10), tl, lostAt, 1000, grace, end, 3)
		require.Zero(t, sum(c.lost))
		require.Equal(t, uint64(4), c.due)
		require.True(t, c.live)
		require.False(t, c.spurious || c.muted || c.skipped)
	})
	t.Run("kept to the end, one missing", func(t *testing.T) {
		c := checkSegment(got("B", recs, 3, 7, 8, 10), tl, lostAt, 1000, grace, end, 3)
		require.Equal(t, []uint64{0, 0, 1}, c.lost, "counter 9, handed over in phase 8%3")
		require.False(t, c.live, "nothing after its recovered notice")
	})
	t.Run("ended by the store's loss: the rest is gone with it", func(t *testing.T) {
		s := got("A", recs, 1, 1, 2, 4)
		s.ended, s.endedAt, s.endedBy, s.endedByReset = true, t0.Add(7*time.Second), "B", true
		c := checkSegment(s, tl, lostAt, 1000, grace, end, 3)
		require.Equal(t, uint64(1), sum(c.lost), "3, before the last received")
		require.Equal(t, uint64(1), c.cut, "5")
		require.False(t, c.muted, "5 was stored 2.5 s before the loss")
		require.Zero(t, c.unconfirmed)
	})
	t.Run("ended by the store's loss, muted before it", func(t *testing.T) {
		s := got("A", recs, 0, 1)
		s.ended, s.endedAt, s.endedBy, s.endedByReset = true, t0.Add(7*time.Second), "B", true
		c := checkSegment(s, tl, lostAt, 1000, grace, end, 3)
		require.Equal(t, uint64(4), c.cut)
		require.True(t, c.muted, "2 was stored 5.5 s before the loss")
	})
	t.Run("a reset no loss explains", func(t *testing.T) {
		s := got("B", recs, 0, 7, 8)
		s.ended, s.endedAt, s.endedBy, s.endedByReset = true, t0.Add(9*time.Second), "B", true
		c := checkSegment(s, tl, lostAt, 1000, grace, end, 3)
		require.True(t, c.spurious)
		require.Zero(t, c.cut, "the next segment replays 9 and 10")
	})
	t.Run("what the history no longer held when it came back", func(t *testing.T) {
		// 3 kept a topic; 5 stored when it recovered: 1 and 2 dropped.
		s := got("A", recs, -1, 3, 4, 5)
		s.recovered = recs[4].doneAt.Add(time.Millisecond)
		require.Zero(t, sum(checkSegment(s, tl, nil, 3, 0, end, 3).lost))
		s = got("A", recs, -1, 4, 5)
		s.recovered = recs[4].doneAt.Add(time.Millisecond)
		require.Equal(t, uint64(1), sum(checkSegment(s, tl, nil, 3, 0, end, 3).lost), "3 was kept")
		s = got("A", recs, -1, 3, 4, 5)
		s.recovered = recs[3].doneAt.Add(time.Millisecond)
		require.Equal(t, uint64(1), sum(checkSegment(s, tl, nil, 3, 0, end, 3).lost), "4 stored when it recovered: 2 was kept")
	})
	t.Run("another epoch's, a failed one, a stranger", func(t *testing.T) {
		s := got("A", recs, 0, 1, 6, 7)
		s.message(99, sourcePublisher, 50, 0)
		c := checkSegment(s, tl, lostAt, 1000, grace, end, 3)
		require.Equal(t, uint64(1), c.misnumbered, "7 is B's")
		require.Equal(t, uint64(1), c.unconfirmed, "6 failed")
		require.Equal(t, uint64(1), c.foreign, "50 was never published")
	})
	t.Run("a copy in the lost epoch, reported stored after the loss", func(t *testing.T) {
		// 7 stored in A, nats-server killed before its report; sent again
		// and reported stored in B after A was lost.
		late := slices.Clone(recs)
		late[6].doneAt = lostAt["A"].Add(time.Second)
		s := got("A", recs, 0, 1, 7)
		c := checkSegment(s, logOf(late), lostAt, 1000, grace, end, 3)
		require.Equal(t, uint64(1), c.lostCopies)
		require.Zero(t, c.misnumbered)
	})
	t.Run("given up empty", func(t *testing.T) {
		s := &segment{epoch: "A", ended: true}
		require.True(t, checkSegment(s, tl, lostAt, 1000, grace, end, 3).skipped)
		require.True(t, checkSegment(&segment{}, tl, lostAt, 1000, grace, end, 3).skipped, "its epoch never named")
	})
}

// Failed publishes count in the phase they were handed over in; publishing
// keeps failing from a failed hand-over to the next one stored; a failure
// outside every outage (and grace after) is one too many.
func TestFailureWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := func(ms int, state uint8, phase uint8) sendRecord {
		return sendRecord{at: at(ms), doneAt: at(ms + 1), state: state, phase: phase}
	}
	recs := [][]sendRecord{
		{rec(0, sendStored, 1), rec(1000, sendFailed, 2), rec(2000, sendFailed, 2), rec(3000, sendStored, 2)},
		{rec(1500, sendFailed, 2), rec(2500, sendStored, 2), rec(9000, sendFailed, 3), rec(9500, sendPending, 3)},
	}
	outages := []outage{{phase: 2, stop: at(900), ready: at(1800)}}
	f := failureWindows(recs, outages, 100*time.Millisecond, 4)
	require.Equal(t, []uint64{0, 0, 3, 1}, f.byPhase)
	require.Equal(t, 1500*time.Millisecond, f.windowMax[2], "from 1000 to 2500")
	require.Zero(t, f.windowMax[3], "the last failed is the last reported")
	require.Equal(t, 2, f.outside, "2000 (past 1800 + 100) and 9000")
	require.Equal(t, 1500*time.Millisecond, f.longest)
}

func TestCounterOf(t *testing.T) {
	for msg, want := range map[string]uint64{
		"\x01\x00\x01envelope{\"n\":42}":           42,
		"xx{\"n\":7,\"at\":1700000000000000}":      7,
		"{\"n\":1}{\"n\":12}":                      12,
		"no counter":                               0,
		"{\"n\":0}":                                0,
		"{\"n\":}":                                 0,
		"{\"n\":99999999999999999999999999999999}": 0,
	} {
		n, ok := counterOf([]byte(msg))
		require.Equal(t, want, n, "%q", msg)
		require.Equal(t, want > 0, ok, "%q", msg)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	require.Zero(t, percentile(d, 50))
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 100*time.Millisecond, percentile(d, 50))
	require.Equal(t, 198*time.Millisecond, percentile(d, 99))
	require.Equal(t, 200*time.Millisecond, percentile(d, 100))
	require.Equal(t, "1,234,567", commas(1234567))
	require.Equal(t, "999", commas(999))
}

func TestConfigPhases(t *testing.T) {
	cfg := config{Phases: "forged, kill,empty"}
	got, err := cfg.selected()
	require.NoError(t, err)
	require.Equal(t, []string{"kill", "empty", "forged"}, got, "in the run's order")
	cfg.Phases = "kill,meteor"
	_, err = cfg.selected()
	require.ErrorContains(t, err, "meteor")
}

// A small chaos run of the phases, with this test binary as its instances
// and its NATS server: 30 clients over 3 instances and 10 topics, 50
// messages a second; an instance killed, nats-server killed and started
// again on its store, every connection cut, nats-server back on an empty
// store with the instances left running and then with them restarted, an
// instance frozen, members joining with forged positions. Nothing is lost,
// duplicated or out of order, every client is told of each new epoch and
// gets it, and the forged members get a reset, the history and live
// messages.
func TestChaosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	cfg := config{
		Instances: 3, Clients: 30, Topics: 10, Rate: 50, Senders: 0, // the driver's publisher publishes
		Phases: "kill,nats,burst,empty,empty-restart,freeze,forged",
		Phase:  700 * time.Millisecond, NATSDown: 300 * time.Millisecond, NATSSignal: "KILL", Drain: 20 * time.Second,
		Kill: 1, Freeze: 1500 * time.Millisecond, FreezeInstance: -1, Forged: 2, Keep: 1000,
		ClientPing: 400 * time.Millisecond, Beat: 100 * time.Millisecond, Grace: 3 * time.Second,
		Outbox: 1024, Work: t.TempDir(),
	}
	cfg.MD = cfg.Work + "/result.md"
	require.NoError(t, cfg.check())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	require.NoError(t, err)
	md, err := os.ReadFile(cfg.MD)
	require.NoError(t, err)
	require.True(t, res.Pass, "%v\n%s", res.Failures, md)
	require.Positive(t, res.Stored)
	require.Len(t, res.Epochs, 3, "two losses of the store")
	phase := func(name string) phaseResult {
		for _, p := range res.Phases {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no phase %s", name)
		return phaseResult{}
	}
	require.GreaterOrEqual(t, phase("kill").Disconnects, 10, "the killed instance's clients")
	require.GreaterOrEqual(t, phase("burst").Disconnects, 30, "every client, and the watchers")
	require.Equal(t, 30, phase("empty").ClientsDue)
	require.Equal(t, 30, phase("empty").ClientsReset)
	require.Equal(t, 30, phase("empty-restart").ClientsDue)
	require.Equal(t, 30, phase("empty-restart").ClientsReset)
	require.Positive(t, phase("freeze").Disconnects, "the frozen instance's clients time out")
	require.Len(t, res.Forged, 5)
	for _, f := range res.Forged {
		require.Equal(t, 2, f.Members, f.Kind)
		require.Equal(t, 2, f.Live, f.Kind)
	}
	require.Contains(t, string(md), "| **lost** | **0** |")
}

// A sender's check: acknowledged in its order, once in the stream, at the
// position acknowledged; copies only in an epoch lost before the one it
// was acknowledged in; resends told apart by the attempt stored.
func TestCheckSender(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ack := func(epoch string, seq uint64, attempts uint16) sentMsg {
		return sentMsg{made: t0, first: t0, ackAt: t0.Add(time.Millisecond), pos: hub.Position{Epoch: epoch, Seq: seq}, attempts: attempts, ackedOn: attempts}
	}
	rank := map[string]int{"A": 0, "B": 1}
	lostAt := map[string]time.Time{"A": t0.Add(time.Second)}
	// Sender 0 (source 1): #1 at A:1; #2 at A:3, resent, the first copy
	// acknowledged; #3 at A:5, after the last a client got of A (4); #4
	// stored in A at 4 unacknowledged, acknowledged at B:1 when resent;
	// #5 at B:2; #6 never acknowledged.
	setup := func() (*sender, streams) {
		s := newSender(0, 0)
		s.msgs = []sentMsg{ack("A", 1, 1), ack("A", 3, 2), ack("A", 5, 1), ack("B", 1, 2), ack("B", 2, 1), {made: t0, first: t0, attempts: 1}}
		st := make(streams)
		for _, x := range []struct {
			epoch string
			a     arrival
		}{
			{"A", arrival{src: 1, k: 1, seq: 1, attempt: 1}},
			{"A", arrival{src: 2, k: 1, seq: 2, attempt: 1}},
			{"A", arrival{src: 1, k: 2, seq: 3, attempt: 1}},
			{"A", arrival{src: 1, k: 4, seq: 4, attempt: 1}},
			{"B", arrival{src: 1, k: 4, seq: 1, attempt: 2}},
			{"B", arrival{src: 1, k: 5, seq: 2, attempt: 1}},
		} {
			st.add(x.epoch, x.a)
		}
		return s, st
	}
	s, st := setup()
	c := checkSender(s, st, rank, lostAt)
	require.Equal(t, senderCheck{sent: 6, acked: 5, unacked: 1, resent: 2, writes: 2, resentDup: 1, resentStored: 1, gone: 1, lostCopies: 1}, c)

	s, st = setup()
	s.msgs[3].pos, s.msgs[4].pos = s.msgs[4].pos, s.msgs[3].pos
	st["B"].at[1], st["B"].at[2] = arrival{src: 1, k: 5, seq: 1, attempt: 1}, arrival{src: 1, k: 4, seq: 2, attempt: 2}
	require.Equal(t, uint64(2), checkSender(s, st, rank, lostAt).outOfOrder, "#5 before #4: acknowledged and in the stream")

	s, st = setup()
	st.add("B", arrival{src: 1, k: 5, seq: 3, attempt: 2})
	require.Equal(t, uint64(1), checkSender(s, st, rank, lostAt).duplicated, "#5 stored again in B")

	s, st = setup()
	st["B"].at[2] = arrival{src: 2, k: 9, seq: 2, attempt: 1}
	require.Equal(t, uint64(1), checkSender(s, st, rank, lostAt).missing, "another message where #5 was acknowledged")

	s, st = setup()
	st.add("B", arrival{src: 1, k: 1, seq: 7, attempt: 2})
	c = checkSender(s, st, rank, lostAt)
	require.Equal(t, uint64(1), c.strays, "#1, acknowledged in A, in B too")
	require.Equal(t, uint64(1), c.outOfOrder, "and after #5 there")

	_, st = setup()
	st.add("B", arrival{src: 1, k: 5, seq: 2, attempt: 2})
	require.Equal(t, uint64(1), st["B"].conflicts, "two clients, two messages at B:2")
}

// A small chaos run with senders: 30 clients over 3 instances and 10
// topics, 20 of them sending 50 messages a second together through their
// instances; an instance killed, then the busiest frozen for 1.5 s, its
// senders resending elsewhere what it had not acknowledged while it holds
// copies it publishes when it wakes up. Every message is acknowledged,
// once in its topic's stream at the position acknowledged, in its
// sender's order; the clients lose nothing and get nothing twice.
func TestChaosRunSenders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	cfg := config{
		Instances: 3, Clients: 30, Topics: 10, Rate: 50, Senders: 20, Phases: "kill,freeze",
		Phase: 700 * time.Millisecond, NATSDown: 300 * time.Millisecond, NATSSignal: "KILL", Drain: 20 * time.Second,
		Kill: 1, Freeze: 1500 * time.Millisecond, FreezeInstance: -1, Keep: 1000,
		ClientPing: 400 * time.Millisecond, Beat: 100 * time.Millisecond, Grace: 3 * time.Second,
		Outbox: 1024, Work: t.TempDir(),
	}
	cfg.MD = cfg.Work + "/result.md"
	require.NoError(t, cfg.check())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	require.NoError(t, err)
	md, err := os.ReadFile(cfg.MD)
	require.NoError(t, err)
	require.True(t, res.Pass, "%v\n%s", res.Failures, md)
	sr := res.Sent
	require.NotNil(t, sr)
	require.Equal(t, 20, sr.Senders)
	require.Greater(t, sr.Sent, uint64(50), "50 a second for 2.1 s")
	require.Equal(t, sr.Sent, sr.Acked)
	require.Equal(t, sr.Sent, res.Stored, "the ledger knows where each is")
	require.Zero(t, sr.Unacked+sr.OutOfOrder+sr.Duplicated+sr.Missing+sr.Strays+sr.OddAcks)
	require.Positive(t, sr.Resent, "the frozen instance's senders resend")
	require.Equal(t, sr.Resent, sr.ResentDup+sr.ResentStored, "each resent message acknowledged at an earlier copy's position, or stored by a resend")
	require.Positive(t, sr.AckP50)
	require.Positive(t, res.DeliveryP50)
	require.Zero(t, res.Lost+res.Duplicated+res.OutOfOrder+res.Misnumbered+res.StreamConflicts)
	for _, p := range res.Phases {
		switch p.Name {
		case "publishing", "kill", "freeze":
			require.Positive(t, p.Sent, p.Name)
		}
		if p.Name == "kill" {
			require.GreaterOrEqual(t, p.Disconnects, 10, "the killed instance's clients")
		}
		if p.Name == "freeze" {
			require.Positive(t, p.Disconnects, "the frozen instance's clients time out")
			require.Positive(t, p.Resent)
		}
	}
	require.Contains(t, string(md), "| **lost** | **0** |")
	require.Contains(t, string(md), "| sent / acknowledged / **not acknowledged at the end** |")
}
