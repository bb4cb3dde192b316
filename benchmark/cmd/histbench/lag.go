package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario lag: does recovering history for members who never read hold
// up a room's live messages? One room; a publisher fills its history, then
// readers join from since=0 and read it all; then, while a publisher sends
// a live message every -interval for -T, -members more join from since=0
// and never read a byte (not even the upgrade's answer) on sockets with a
// small receive buffer, so that each makes the chat recover the whole
// history to a member that takes none of it. The readers time each live
// message from its send to its arrival.

type lagConfig struct {
	members, readers, fill, text int
	window                       int // messages in flight while filling
	interval, span, drain        time.Duration
	rcvbuf, dialPar              int
	byMessage                    bool // print each live message's worst lag
}

type lagResult struct {
	Members    int     `json:"members"`
	Readers    int     `json:"readers"`
	Fill       int     `json:"fill"`
	TextBytes  int     `json:"text_bytes"`
	IntervalMS float64 `json:"interval_ms"`
	Seconds    float64 `json:"seconds"`
	RcvBuf     int     `json:"rcvbuf"`

	Dialed      int     `json:"dialed"`       // members whose upgrade request went out
	DialSeconds float64 `json:"dial_seconds"` // how long dialing them all took
	Joined      int     `json:"joined"`       // of them, seen joining by a reader (presence)
	Left        int     `json:"left"`         // of them, seen leaving by the end: cut by the chat
	ReadersLost int     `json:"readers_lost"` // readers the chat closed
	Recovered   int     `json:"recovered"`    // messages each reader recovered before the live ones

	Live    int     `json:"live"`    // live messages sent
	Samples int     `json:"samples"` // live messages × readers
	Missing int     `json:"missing"` // samples not there at the end of the drain (counted at that time)
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
	MaxMS   float64 `json:"max_ms"`
	Over1s  float64 `json:"over_1s"` // the fraction of samples later than 1 s

	ChatPeakRSSMiB float64 `json:"chat_peak_rss_mib"`
	ChatLogLines   int     `json:"chat_log_lines"`
}

const lagRoom = "hb-lag"

// lagReader is a reading member's view of the live messages.
type lagReader struct {
	m         *member
	recovered chan struct{}
	hist      int             // messages before the recovered frame
	lags      []time.Duration // by live message; valid where got
	got       []bool
	live      atomic.Int64 // live messages received
	joined    atomic.Int64 // silent members seen joining
	left      atomic.Int64 // and leaving
}

var livePrefix = []byte("live ")

func (r *lagReader) on(f frame) {
	now := sinceStart()
	switch f.kind {
	case kindMessage:
		if !bytes.HasPrefix(f.text, livePrefix) {
			if r.recovered != nil {
				r.hist++
			}
			return
		}
		idText, nsText, _ := bytes.Cut(f.text[len(livePrefix):], []byte(" "))
		id, err1 := strconv.Atoi(string(idText))
		ns, err2 := strconv.ParseInt(string(nsText), 10, 64)
		if err1 != nil || err2 != nil || id < 0 || id >= len(r.got) || r.got[id] {
			return
		}
		r.lags[id], r.got[id] = now-time.Duration(ns), true
		r.live.Add(1)
	case kindRecovered:
		if r.recovered != nil {
			close(r.recovered)
			r.recovered = nil
		}
	case kindJoin:
		if bytes.HasPrefix(f.name, []byte("idle-")) {
			r.joined.Add(1)
		}
	case kindLeave:
		if bytes.HasPrefix(f.name, []byte("idle-")) {
			r.left.Add(1)
		}
	}
}

func runLag(ctx context.Context, ch *chatProc, cfg lagConfig) (*lagResult, error) {
	res := &lagResult{
		Members: cfg.members, Readers: cfg.readers, Fill: cfg.fill, TextBytes: cfg.text,
		IntervalMS: ms(cfg.interval), Seconds: cfg.span.Seconds(), RcvBuf: cfg.rcvbuf,
	}
	pub, _, err := say(ctx, ch.addr, "publisher", lagRoom, cfg.fill, cfg.text, cfg.window)
	if err != nil {
		return nil, fmt.Errorf("filling the history: %w", err)
	}
	defer pub.close()

	nLive := int(cfg.span / cfg.interval)
	readers := make([]*lagReader, cfg.readers)
	for i := range readers {
		r := &lagReader{recovered: make(chan struct{}), lags: make([]time.Duration, nLive), got: make([]bool, nLive)}
		recovered := r.recovered
		m, err := join(ctx, ch.addr, fmt.Sprintf("reader-%d", i), lagRoom, "0", r.on)
		if err != nil {
			return nil, err
		}
		r.m = m
		defer m.close()
		readers[i] = r
		select {
		case <-recovered:
		case <-m.done:
			return nil, fmt.Errorf("reader %d before its recovery ended: %w", i, m.failed())
		case <-ctx.Done():
			return nil, fmt.Errorf("reader %d recovering: %w", i, ctx.Err())
		}
	}
	res.Recovered = readers[0].hist // read after its recovered frame

	// The live messages and the silent members start together.
	t0 := time.Now()
	sent := make([]time.Duration, nLive)
	pubErr := make(chan error, 1)
	go func() {
		for i := range nLive {
			if !sleepUntil(ctx, t0.Add(time.Duration(i)*cfg.interval)) {
				pubErr <- ctx.Err()
				return
			}
			sent[i] = sinceStart()
			msg := fmt.Appendf(nil, `{"text":"live %d %d"}`, i, sent[i].Nanoseconds())
			if err := pub.c.writeText(msg); err != nil {
				pubErr <- fmt.Errorf("the publisher's live message %d: %w (its connection: %v)", i, err, pub.failed())
				return
			}
		}
		pubErr <- nil
	}()

	silent, dialTime := dialSilentMembers(ctx, ch.addr, cfg)
	res.Dialed, res.DialSeconds = len(silent), dialTime.Seconds()
	defer func() {
		for _, nc := range silent {
			nc.Close()
		}
	}()
	if err := <-pubErr; err != nil {
		return nil, err
	}
	if err := ch.alive(); err != nil {
		return nil, err
	}

	// Drain: every reader has every live message, or the time is up.
	drainUntil := time.Now().Add(cfg.drain)
	for time.Now().Before(drainUntil) && ctx.Err() == nil {
		all := true
		for _, r := range readers {
			if r.live.Load() < int64(nLive) && r.m.failed() == nil {
				all = false
			}
		}
		if all {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	end := sinceStart()
	if _, hwm, err := ch.procStatus(); err == nil {
		res.ChatPeakRSSMiB = hwm
	}
	res.ChatLogLines = ch.logLines()

	var lags []float64
	for _, r := range readers {
		if r.m.failed() != nil {
			res.ReadersLost++
		}
		res.Joined = max(res.Joined, int(r.joined.Load()))
		res.Left = max(res.Left, int(r.left.Load()))
		r.m.close() // its goroutine has ended: lags and got are ours
		for i := range nLive {
			if r.got[i] {
				lags = append(lags, ms(r.lags[i]))
			} else {
				res.Missing++
				lags = append(lags, ms(end-sent[i]))
			}
		}
	}
	if cfg.byMessage { // when in the run the lag was
		for i := range nLive {
			worst := time.Duration(0)
			for _, r := range readers {
				if r.got[i] && r.lags[i] > worst {
					worst = r.lags[i]
				}
			}
			fmt.Fprintf(os.Stderr, "live %d: sent at %.0f ms, worst lag %.1f ms\n", i, ms(sent[i]), ms(worst))
		}
	}
	slices.Sort(lags)
	res.Live, res.Samples = nLive, len(lags)
	res.P50MS, res.P99MS, res.MaxMS = percentile(lags, 0.50), percentile(lags, 0.99), percentile(lags, 1)
	over := len(lags) - sortedCountBelowOrAt(lags, 1000)
	if len(lags) > 0 {
		res.Over1s = float64(over) / float64(len(lags))
	}
	return res, ctx.Err()
}

// dialSilentMembers opens cfg.members connections that ask to join the
// room from since=0 and then read nothing, cfg.dialPar at a time. It
// returns those that opened, and how long it took.
func dialSilentMembers(ctx context.Context, addr string, cfg lagConfig) ([]net.Conn, time.Duration) {
	start := time.Now()
	var (
		mu    sync.Mutex
		conns []net.Conn
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	path := func(i int) string { return wsPath("idle-"+strconv.Itoa(i), lagRoom, "0") }
	for range min(cfg.dialPar, cfg.members) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.members || ctx.Err() != nil {
					return
				}
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				nc, err := dialSilent(dctx, addr, path(i), cfg.rcvbuf)
				cancel()
				if err != nil {
					continue // counted: Dialed falls short of Members
				}
				mu.Lock()
				conns = append(conns, nc)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return conns, time.Since(start)
}
