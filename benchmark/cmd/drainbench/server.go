package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/gustws/gust"
)

// bucket is the length of the buckets the handshakes are counted in.
const bucket = 100 * time.Millisecond

// maxBuckets bounds the time a server counts handshakes for: an hour.
const maxBuckets = int(time.Hour / bucket)

// counter is a server's Event handler: it counts the connections open and
// the handshakes answered, by bucket since start.
type counter struct {
	gust.BuiltinEventHandler
	start   time.Time
	open    atomic.Int64
	opened  []atomic.Int64 // by bucket since start
	healthz atomic.Int64   // health checks answered
}

func (h *counter) OnOpen(*gust.Conn) {
	h.open.Add(1)
	if i := int(time.Since(h.start) / bucket); i < maxBuckets {
		h.opened[i].Add(1)
	}
}

func (h *counter) OnClose(*gust.Conn, error) { h.open.Add(-1) }

// stats is what a server's /stats answers.
type stats struct {
	Open     int64   `json:"open"`
	Healthz  int64   `json:"healthz"`
	StartMS  int64   `json:"start_unix_ms"` // the start of bucket 0
	BucketMS int64   `json:"bucket_ms"`
	Opened   []int64 `json:"opened"` // handshakes answered in each bucket, up to the last non-empty one
}

// runServer serves gust connections on addr beside three plain routes:
// GET /healthz (503 while draining, as docs/proxies.md shows), GET /stats, and
// POST /stop?how=shutdown|drain&window=D, which stops the Server; the
// process exits once the stop has returned.
func runServer(addr string, netpoll bool) error {
	h := &counter{start: time.Now(), opened: make([]atomic.Int64, maxBuckets)}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h, Options: gust.Options{Netpoll: netpoll}}}
	stopped := make(chan error, 1)
	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		h.healthz.Add(1)
		if srv.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		st := stats{Open: h.open.Load(), Healthz: h.healthz.Load(), StartMS: h.start.UnixMilli(), BucketMS: bucket.Milliseconds()}
		last := -1
		for i := range h.opened {
			if h.opened[i].Load() != 0 {
				last = i
			}
		}
		st.Opened = make([]int64, last+1)
		for i := range st.Opened {
			st.Opened[i] = h.opened[i].Load()
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		how := r.URL.Query().Get("how")
		window, err := time.ParseDuration(r.URL.Query().Get("window"))
		if how != "shutdown" && how != "drain" || how == "drain" && err != nil {
			http.Error(w, "want how=shutdown or how=drain&window=D", http.StatusBadRequest)
			return
		}
		if !stopping.CompareAndSwap(false, true) {
			http.Error(w, "stopping already", http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), window+time.Minute)
			defer cancel()
			start := time.Now()
			if how == "drain" {
				err = srv.Drain(ctx, window, 0)
			} else {
				err = srv.Shutdown(ctx)
			}
			fmt.Fprintf(os.Stderr, "server %s: %s returned %v after %v\n", addr, how, err, time.Since(start).Round(time.Millisecond))
			stopped <- err
		}()
	})
	srv.HTTPHandler = mux
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "server listening on %s (netpoll %v)\n", addr, netpoll)
	// Serve returns once the stop has closed the listener; the stop
	// returns once the connections have ended.
	if err := srv.Serve(ln); !errors.Is(err, gust.ErrServerClosed) {
		return err
	}
	return <-stopped
}
