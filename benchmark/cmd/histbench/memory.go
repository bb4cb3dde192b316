package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario memory: what the history holds once many rooms have been
// written to. -rooms rooms, each written by one member who joins it and
// says -room-msgs texts, -par rooms at a time; the chat's live heap (from
// its gctrace lines) and RSS before and after.

type memoryConfig struct {
	rooms, perRoom, text, par, window int
}

type memoryResult struct {
	Rooms     int `json:"rooms"`
	PerRoom   int `json:"per_room"`
	TextBytes int `json:"text_bytes"`
	Parallel  int `json:"parallel"`

	Messages    int     `json:"messages"` // said and back from the chat
	LoadSeconds float64 `json:"load_seconds"`

	HeapBeforeMiB int     `json:"heap_before_mib"` // live heap after a GC (gctrace's ->C MB)
	HeapAfterMiB  int     `json:"heap_after_mib"`
	HeapGrowthMiB int     `json:"heap_growth_mib"`
	RSSBeforeMiB  float64 `json:"rss_before_mib"`
	RSSAfterMiB   float64 `json:"rss_after_mib"`
	RSSGrowthMiB  float64 `json:"rss_growth_mib"`
	GCBefore      int     `json:"gc_before"` // the gctrace lines the heap figures come from
	GCAfter       int     `json:"gc_after"`

	ChatPeakRSSMiB float64 `json:"chat_peak_rss_mib"`
	ChatLogLines   int     `json:"chat_log_lines"`
}

func runMemory(ctx context.Context, ch *chatProc, cfg memoryConfig) (*memoryResult, error) {
	res := &memoryResult{Rooms: cfg.rooms, PerRoom: cfg.perRoom, TextBytes: cfg.text, Parallel: cfg.par}
	// The member that makes garbage for the GCs lives in a room of its own
	// from before the first measure to after the last.
	nudge, err := join(ctx, ch.addr, "gc-nudge", "hb-gc-nudge", "0", nil)
	if err != nil {
		return nil, err
	}
	defer nudge.close()
	if res.HeapBeforeMiB, res.RSSBeforeMiB, res.GCBefore, err = ch.liveHeap(ctx, nudge.c); err != nil {
		return nil, fmt.Errorf("before the load: %w", err)
	}

	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next, said atomic.Int64
		wg         sync.WaitGroup
	)
	for range min(cfg.par, cfg.rooms) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.rooms || ctx.Err() != nil {
					return
				}
				m, _, err := say(ctx, ch.addr, fmt.Sprintf("writer-%d", i), fmt.Sprintf("hb-m-%04d", i), cfg.perRoom, cfg.text, cfg.window)
				if err != nil {
					cancel(err)
					return
				}
				m.close()
				said.Add(int64(cfg.perRoom))
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("the load: %w", err)
	}
	res.Messages, res.LoadSeconds = int(said.Load()), time.Since(start).Seconds()

	if res.HeapAfterMiB, res.RSSAfterMiB, res.GCAfter, err = ch.liveHeap(ctx, nudge.c); err != nil {
		return nil, fmt.Errorf("after the load: %w", err)
	}
	res.HeapGrowthMiB = res.HeapAfterMiB - res.HeapBeforeMiB
	res.RSSGrowthMiB = res.RSSAfterMiB - res.RSSBeforeMiB
	if _, hwm, err := ch.procStatus(); err == nil {
		res.ChatPeakRSSMiB = hwm
	}
	res.ChatLogLines = ch.logLines()
	return res, nil
}
