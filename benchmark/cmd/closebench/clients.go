package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/benchmark/internal/load"
)

// clientCounts is what a clients process prints when it stops.
type clientCounts struct {
	Opened     int64 `json:"opened"`      // connections made
	Failed     int64 `json:"failed"`      // dials that failed
	GoingAway  int64 `json:"going_away"`  // connections the server closed with 1001
	OtherClose int64 `json:"other_close"` // connections that ended otherwise
}

// closeCounter is a clients process's Event handler: it counts how its
// connections end.
type closeCounter struct {
	gust.BuiltinEventHandler
	n       *clientCounts
	stopped *atomic.Bool
}

func (h closeCounter) OnClose(_ *gust.Conn, err error) {
	switch {
	case h.stopped.Load():
	case gust.CloseStatus(err) == gust.StatusGoingAway:
		atomic.AddInt64(&h.n.GoingAway, 1)
	default:
		atomic.AddInt64(&h.n.OtherClose, 1)
	}
}

// runClients opens n connections to url from source (netpoll mode: they
// wait on event loops, not a goroutine each), 64 dials at a time, and
// holds them until the server closes them all, hold passes, or the process
// is told to stop (SIGTERM, SIGINT); then it prints its counts as JSON.
func runClients(url, source string, n int, hold time.Duration) error {
	if url == "" {
		return errors.New("clients: -url is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), hold)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var counts clientCounts
	var stopped atomic.Bool
	h := closeCounter{n: &counts, stopped: &stopped}
	dialer := &net.Dialer{KeepAlive: -1}
	if source != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
		// The port is left to connect: bind would take one of the source's
		// ports for good, and the last measurements' connections, in
		// TIME_WAIT, leave too few for 10,000 (bind: address in use).
		dialer.Control = load.BindNoPort
	}
	opts := &gust.DialOptions{
		HandshakeTimeout: 30 * time.Second,
		NetDialContext:   dialer.DialContext,
		TLSConfig:        &tls.Config{InsecureSkipVerify: true},
		Options:          gust.Options{Netpoll: true},
	}
	var mu sync.Mutex
	var conns []*gust.Conn
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c, _, err := gust.Dial(ctx, url, h, opts)
			if err != nil {
				if atomic.AddInt64(&counts.Failed, 1) <= 3 {
					fmt.Fprintln(os.Stderr, "clients: dial:", err)
				}
				return
			}
			atomic.AddInt64(&counts.Opened, 1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go c.ReadLoop() // in netpoll mode, returns once the connection is parked
		})
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "clients: %d of %d open to %s from %s\n", atomic.LoadInt64(&counts.Opened), n, url, source)
	<-ctx.Done()
	stopped.Store(true)
	snapshot := clientCounts{
		Opened: atomic.LoadInt64(&counts.Opened), Failed: atomic.LoadInt64(&counts.Failed),
		GoingAway: atomic.LoadInt64(&counts.GoingAway), OtherClose: atomic.LoadInt64(&counts.OtherClose),
	}
	mu.Lock()
	for _, c := range conns {
		c.CloseNow()
	}
	mu.Unlock()
	return json.NewEncoder(os.Stdout).Encode(snapshot)
}
