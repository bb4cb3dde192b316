package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Scenario recovery: how long a crowd that reconnects at once waits for
// what it missed. A room with -fill kept messages; -clients members who
// each saw all but the last -missed connect at the same moment, passing
// the position of the message before those as since (EPOCH:SEQ with the
// epoch a probe member read from its recovered frame; the plain sequence
// for the build before epochs). Each times the span from the start of its
// dial to its recovered frame.

type recoveryConfig struct {
	clients, fill, missed, text int
	window                      int // messages in flight while filling
	wait                        time.Duration
}

type recoveryResult struct {
	Clients   int    `json:"clients"`
	Fill      int    `json:"fill"`
	Missed    int    `json:"missed"`
	TextBytes int    `json:"text_bytes"`
	Since     string `json:"since"`

	OK      int `json:"ok"`       // clients that got their recovered frame
	Failed  int `json:"failed"`   // that did not (a failed dial, closed, or -wait passed)
	Gaps    int `json:"gaps"`     // clients told of a gap (or a reset) before recovered
	MsgsMin int `json:"msgs_min"` // messages a client got before recovered: Missed when all is well
	MsgsMax int `json:"msgs_max"`

	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	MeanMS float64 `json:"mean_ms"`

	FirstError     string  `json:"first_error,omitempty"`
	ChatPeakRSSMiB float64 `json:"chat_peak_rss_mib"`
	ChatLogLines   int     `json:"chat_log_lines"`
}

const recoveryRoom = "hb-recovery"

// recoveryClient is one member of the crowd; what its reading goroutine
// writes is read once recovered is closed, or once it has ended.
type recoveryClient struct {
	start     time.Time
	took      time.Duration
	msgs      int
	gap       bool
	recovered chan struct{}
	done      bool
}

func (c *recoveryClient) on(f frame) {
	if c.done {
		return
	}
	switch f.kind {
	case kindMessage:
		c.msgs++
	case kindGap:
		c.gap = true
	case kindRecovered:
		c.took, c.done = time.Since(c.start), true
		close(c.recovered)
	}
}

func runRecovery(ctx context.Context, ch *chatProc, cfg recoveryConfig) (*recoveryResult, error) {
	res := &recoveryResult{Clients: cfg.clients, Fill: cfg.fill, Missed: cfg.missed, TextBytes: cfg.text}
	if cfg.missed >= cfg.fill {
		return nil, fmt.Errorf("-missed %d must be below -fill %d", cfg.missed, cfg.fill)
	}
	pub, _, err := say(ctx, ch.addr, "publisher", recoveryRoom, cfg.fill, cfg.text, cfg.window)
	if err != nil {
		return nil, fmt.Errorf("filling the history: %w", err)
	}
	pub.close()

	// The probe reads what the room keeps, and the epoch.
	var (
		seqs  []uint64
		epoch string
	)
	probeDone := make(chan struct{})
	probe, err := join(ctx, ch.addr, "probe", recoveryRoom, "0", func(f frame) {
		switch f.kind {
		case kindMessage:
			seqs = append(seqs, f.seq)
		case kindRecovered:
			epoch = f.epoch
			close(probeDone)
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-probeDone:
	case <-probe.done:
		return nil, fmt.Errorf("the probe: %w", probe.failed())
	case <-ctx.Done():
		return nil, fmt.Errorf("the probe: %w", ctx.Err())
	}
	probe.close()
	if len(seqs) <= cfg.missed {
		return nil, fmt.Errorf("the room keeps %d messages, not more than -missed %d", len(seqs), cfg.missed)
	}
	res.Since = position(epoch, seqs[len(seqs)-cfg.missed-1])

	clients := make([]*recoveryClient, cfg.clients)
	members := make([]*member, cfg.clients)
	errs := make([]error, cfg.clients)
	go1 := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		c := &recoveryClient{recovered: make(chan struct{})}
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-go1
			wctx, cancel := context.WithTimeout(ctx, cfg.wait)
			defer cancel()
			c.start = time.Now()
			m, err := join(wctx, ch.addr, fmt.Sprintf("client-%d", i), recoveryRoom, res.Since, c.on)
			if err != nil {
				errs[i] = err
				return
			}
			members[i] = m
			select {
			case <-c.recovered:
			case <-m.done:
				errs[i] = fmt.Errorf("client %d: %w", i, m.failed())
			case <-wctx.Done():
				errs[i] = fmt.Errorf("client %d: no recovered frame within %v", i, cfg.wait)
			}
		}()
	}
	close(go1)
	wg.Wait()
	// Everyone has what they came for (or has given up): only now do they
	// leave, so that none is alone for the last ones.
	if _, hwm, err := ch.procStatus(); err == nil {
		res.ChatPeakRSSMiB = hwm
	}
	res.ChatLogLines = ch.logLines()
	for _, m := range members {
		if m != nil {
			m.close()
		}
	}

	var took []float64
	var sum float64
	res.MsgsMin = -1
	for i, c := range clients {
		if errs[i] != nil {
			res.Failed++
			if res.FirstError == "" {
				res.FirstError = errs[i].Error()
			}
			continue
		}
		res.OK++
		t := ms(c.took)
		took = append(took, t)
		sum += t
		if c.gap {
			res.Gaps++
		}
		if res.MsgsMin < 0 || c.msgs < res.MsgsMin {
			res.MsgsMin = c.msgs
		}
		res.MsgsMax = max(res.MsgsMax, c.msgs)
	}
	slices.Sort(took)
	res.P50MS, res.P99MS, res.MaxMS = percentile(took, 0.50), percentile(took, 0.99), percentile(took, 1)
	if len(took) > 0 {
		res.MeanMS = sum / float64(len(took))
	}
	return res, ctx.Err()
}
