package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gustws/gust"
)

// The backoff of examples/chat's page (static/index.html): 250 ms after a
// connection opened, doubled after each wait up to 5 s, each wait drawn in
// [1/2, 1] of it.
const (
	backoffFirst = 250 * time.Millisecond
	backoffMax   = 5 * time.Second
)

// jitter is the page's wait for backoff b.
func jitter(b time.Duration) time.Duration {
	return time.Duration(float64(b) * (0.5 + rand.Float64()/2))
}

// clientCounts is what a clients process reports when it stops.
type clientCounts struct {
	Conns      int64 `json:"conns"`       // connections open at the end
	Opens      int64 `json:"opens"`       // handshakes that succeeded, first ones included
	Refused    int64 `json:"refused"`     // handshakes answered with an HTTP error (503 from gust or HAProxy)
	Failed     int64 `json:"failed"`      // dials that failed otherwise
	GoingAway  int64 `json:"going_away"`  // connections closed with 1001
	Restart    int64 `json:"restart"`     // connections closed with 1012
	OtherClose int64 `json:"other_close"` // connections that ended otherwise
}

// reconnector is a clients process's Event handler: it counts how its
// connections end, until ctx, the process's, is done.
type reconnector struct {
	gust.BuiltinEventHandler
	n   *clientCounts
	ctx context.Context
}

func (h reconnector) OnClose(_ *gust.Conn, err error) {
	if h.ctx.Err() != nil {
		return // the process is stopping
	}
	switch gust.CloseStatus(err) {
	case gust.StatusGoingAway:
		atomic.AddInt64(&h.n.GoingAway, 1)
	case gust.StatusServiceRestart:
		atomic.AddInt64(&h.n.Restart, 1)
	default:
		atomic.AddInt64(&h.n.OtherClose, 1)
	}
}

// runClients keeps n connections to url, each reconnecting with the
// page's backoff whenever it ends, until hold passes or the process is
// told to stop (SIGTERM, SIGINT); then it prints its counts as JSON.
// At most 64 first dials are in flight at once.
func runClients(url string, n int, hold time.Duration) error {
	if url == "" {
		return errors.New("clients: -url is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), hold)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var counts clientCounts
	h := reconnector{n: &counts, ctx: ctx}
	opts := &gust.DialOptions{HandshakeTimeout: 10 * time.Second}
	first := make(chan struct{}, 64)
	for range n {
		go func() {
			backoff := backoffFirst
			initial := true
			for ctx.Err() == nil {
				if initial {
					first <- struct{}{}
				}
				c, _, err := gust.Dial(ctx, url, h, opts)
				if initial {
					<-first
				}
				if err == nil {
					initial = false
					atomic.AddInt64(&counts.Opens, 1)
					atomic.AddInt64(&counts.Conns, 1)
					backoff = backoffFirst
					stopped := context.AfterFunc(ctx, func() { c.CloseNow() })
					c.ReadLoop() // until the connection ends
					stopped()
					atomic.AddInt64(&counts.Conns, -1)
				} else if ctx.Err() == nil {
					var herr *gust.HandshakeError
					if errors.As(err, &herr) && herr.Status != 0 && herr.Status != 101 {
						atomic.AddInt64(&counts.Refused, 1)
					} else {
						atomic.AddInt64(&counts.Failed, 1)
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(jitter(backoff)):
				}
				backoff = min(2*backoff, backoffMax)
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "clients: %d to %s\n", n, url)
	<-ctx.Done()
	snapshot := clientCounts{
		Conns: atomic.LoadInt64(&counts.Conns), Opens: atomic.LoadInt64(&counts.Opens),
		Refused: atomic.LoadInt64(&counts.Refused), Failed: atomic.LoadInt64(&counts.Failed),
		GoingAway: atomic.LoadInt64(&counts.GoingAway), Restart: atomic.LoadInt64(&counts.Restart),
		OtherClose: atomic.LoadInt64(&counts.OtherClose),
	}
	return json.NewEncoder(os.Stdout).Encode(snapshot)
}
