package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client's tally tells duplicates (a counter again, under its sequence
// or a new one) from messages out of order (a lower sequence or counter),
// and counts as lost the confirmed counters it never got.
func TestTally(t *testing.T) {
	var tl tally
	tl.message(3, 1)
	tl.message(7, 2)
	tl.message(7, 2)  // the same message again
	tl.message(9, 2)  // stored twice
	tl.message(8, 4)  // a lower sequence
	tl.message(12, 3) // a lower counter
	tl.message(13, 6)
	require.Equal(t, uint64(7), tl.received)
	require.Equal(t, uint64(2), tl.duplicated)
	require.Equal(t, uint64(2), tl.outOfOrder)
	require.Equal(t, uint64(13), tl.lastSeq)
	require.Equal(t, uint64(6), tl.maxCounter)

	var confirmed bitset
	for _, n := range []uint64{1, 2, 3, 4, 5, 6, 70, 130} {
		confirmed.set(n)
	}
	require.Equal(t, uint64(8), confirmed.count())
	require.Equal(t, uint64(3), tl.lost(confirmed), "5, 70 and 130")
	require.Zero(t, (&tally{}).lost(nil))
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

// A small chaos run, with this test binary as its instances and its NATS
// server: 30 clients over 3 instances and 10 topics, 50 messages a second,
// an instance killed, the NATS server killed and started again. Nothing is
// lost, duplicated or out of order, and the killed instance's clients
// recover on the others.
func TestChaosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	cfg := config{
		Instances: 3, Clients: 30, Topics: 10, Rate: 50,
		Phase: time.Second, NATSDown: 300 * time.Millisecond, NATSSignal: "KILL", Drain: 15 * time.Second,
		Kill: 1, Outbox: 1024, Work: t.TempDir(),
	}
	cfg.MD = cfg.Work + "/result.md"
	require.NoError(t, cfg.check())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := run(ctx, cfg)
	require.NoError(t, err)
	require.True(t, res.Pass, "%v", res.Failures)
	require.Positive(t, res.Published)
	require.Equal(t, res.Published*3, res.Expected)
	require.Equal(t, res.Expected, res.Delivered)
	require.Equal(t, 10, res.Disconnects[phaseNames[phaseInstance]], "the killed instance's clients")
	require.Equal(t, 10, res.Recoveries)
	require.Nil(t, res.PerInstance[1])
	require.NotNil(t, res.PerInstance[0])
	require.NotNil(t, res.PerInstance[2])
	md, err := os.ReadFile(cfg.MD)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(md), "| **lost** | **0** |"), string(md))
}
