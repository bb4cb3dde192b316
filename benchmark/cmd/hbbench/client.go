package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gustws/gust"
)

type clientConfig struct {
	addr              string
	conns             int
	rate, concurrency int
	hold, timeout     time.Duration
}

// answerer is BuiltinEventHandler, which answers every ping, counting the
// pings it answers.
type answerer struct {
	gust.BuiltinEventHandler
	pings atomic.Int64
}

func (h *answerer) OnPing(c *gust.Conn, p []byte) {
	h.pings.Add(1)
	h.BuiltinEventHandler.OnPing(c, p)
}

// retryable reports whether a dial that failed with err may be tried again:
// no local port free yet, or the server's accept queue full.
func retryable(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded)
}

// runClients opens cfg.conns connections at cfg.rate dials a second at most,
// holds them until the server closes them all or cfg.hold passes, and prints
// a summary line to stderr.
func runClients(cfg clientConfig) error {
	h := &answerer{}
	url := "ws://" + cfg.addr + "/"
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()

	var (
		mu      sync.Mutex
		open    []*gust.Conn
		loops   sync.WaitGroup
		retries atomic.Int64
		failed  error
	)
	tick := time.NewTicker(time.Second / time.Duration(max(cfg.rate, 1)))
	defer tick.Stop()
	slots := make(chan struct{}, max(cfg.concurrency, 1))
	var dials sync.WaitGroup
	start := time.Now()
	for i := 0; i < cfg.conns && ctx.Err() == nil; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		slots <- struct{}{}
		dials.Add(1)
		go func() {
			defer func() { <-slots; dials.Done() }()
			for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
				dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
				c, _, err := gust.Dial(dctx, url, h, nil)
				dcancel()
				if err == nil {
					mu.Lock()
					open = append(open, c)
					mu.Unlock()
					loops.Add(1)
					go func() { defer loops.Done(); c.ReadLoop() }()
					return
				}
				if !retryable(err) || ctx.Err() != nil {
					mu.Lock()
					if failed == nil {
						failed = err
					}
					mu.Unlock()
					cancel() // one connection that cannot be made fails the run
					return
				}
				retries.Add(1)
				time.Sleep(pause)
			}
		}()
	}
	dials.Wait()
	mu.Lock()
	n, ferr := len(open), failed
	mu.Unlock()
	if ferr == nil && n < cfg.conns {
		ferr = fmt.Errorf("dialing took longer than -timeout %v", cfg.timeout)
	}
	fmt.Fprintf(os.Stderr, "hbbench: client: %d connections open in %v (%d retries)\n", n, time.Since(start).Round(time.Millisecond), retries.Load())

	ended := make(chan struct{})
	go func() { loops.Wait(); close(ended) }()
	closedByServer := true
	if ferr == nil {
		select {
		case <-ended:
		case <-time.After(cfg.hold):
			closedByServer = false
		}
	}
	mu.Lock()
	for _, c := range open {
		c.CloseNow()
	}
	mu.Unlock()
	<-ended

	sum, _ := json.Marshal(map[string]any{
		"opened": n, "retries": retries.Load(), "pings_answered": h.pings.Load(),
		"closed_by_server": ferr == nil && closedByServer, "seconds": time.Since(start).Seconds(),
	})
	fmt.Fprintf(os.Stderr, "hbbench: client: %s\n", sum)
	if ferr != nil {
		return fmt.Errorf("client: %d of %d connections: %w", n, cfg.conns, ferr)
	}
	return nil
}
