package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gustws/gust"
)

type serverConfig struct {
	addr              string
	conns             int
	ping, pingTimeout time.Duration
	settle, window    time.Duration
	wait              time.Duration
}

// counter is the server's handler: it counts opens and closes, and keeps
// the first error a close during the measured window reported.
type counter struct {
	gust.BuiltinEventHandler
	opens, closes atomic.Int64

	mu       sync.Mutex
	watching bool   // the measured window is running
	firstCut string // the first close during the window, and why
}

func (h *counter) OnOpen(*gust.Conn) { h.opens.Add(1) }

func (h *counter) OnClose(_ *gust.Conn, err error) {
	h.closes.Add(1)
	h.mu.Lock()
	if h.watching && h.firstCut == "" {
		h.firstCut = fmt.Sprint(err)
	}
	h.mu.Unlock()
}

func (h *counter) watch(on bool) {
	h.mu.Lock()
	h.watching = on
	h.mu.Unlock()
}

func (h *counter) open() int64 { return h.opens.Load() - h.closes.Load() }

// memory is what the server holds at one moment, after a full GC.
type memory struct {
	heapInuse, heapAlloc, stackInuse uint64
	rss                              uint64 // bytes
}

func measureMemory() (memory, error) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, err := vmRSS()
	return memory{heapInuse: ms.HeapInuse, heapAlloc: ms.HeapAlloc, stackInuse: ms.StackInuse, rss: rss}, err
}

// vmRSS reads the process's resident set size from /proc/self/status.
func vmRSS() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kib, err := strconv.ParseUint(string(f[1]), 10, 64)
			return kib << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// result is the JSON line the server prints.
type result struct {
	Ping             string  `json:"ping"` // "0s" when off
	PingTimeout      string  `json:"ping_timeout"`
	Expected         int     `json:"expected"`
	Conns            int64   `json:"conns"` // open at the end of the window
	Seconds          float64 `json:"seconds"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	CPUPercent       float64 `json:"cpu_percent"`           // of one core
	CPUMicrosPerConn float64 `json:"cpu_us_per_conn_per_s"` // CPU µs per connection per second
	HeapInuse0       uint64  `json:"heap_inuse_0"`
	HeapAlloc0       uint64  `json:"heap_alloc_0"`
	RSS0             uint64  `json:"rss_0"`
	HeapInuseN       uint64  `json:"heap_inuse_n"`
	HeapAllocN       uint64  `json:"heap_alloc_n"`
	RSSN             uint64  `json:"rss_n"`
	HeapInusePerConn float64 `json:"heap_inuse_per_conn"` // (with N - with 0) / N, bytes
	HeapAllocPerConn float64 `json:"heap_alloc_per_conn"`
	StackPerConn     float64 `json:"stack_per_conn"`
	RSSPerConn       float64 `json:"rss_per_conn"`
	Goroutines       int     `json:"goroutines"`
	Cut              int64   `json:"cut"` // connections closed during the window
	FirstCut         string  `json:"first_cut,omitempty"`
	Error            string  `json:"error,omitempty"`
}

func serve(cfg serverConfig) error {
	h := &counter{}
	s := &gust.Server{Upgrader: gust.Upgrader{
		Handler: h,
		Options: gust.Options{PingInterval: cfg.ping, PingTimeout: cfg.pingTimeout},
	}}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() {
		s.Close()
		if err := <-served; !errors.Is(err, gust.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "hbbench: serve: %v\n", err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // Serve has made the config (and the wheel) and is accepting
	m0, err := measureMemory()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "hbbench: listening on %s, ping %v, waiting for %d connections\n", ln.Addr(), cfg.ping, cfg.conns)

	r := result{
		Ping: cfg.ping.String(), PingTimeout: cfg.pingTimeout.String(), Expected: cfg.conns,
		HeapInuse0: m0.heapInuse, HeapAlloc0: m0.heapAlloc, RSS0: m0.rss,
	}
	emit := func() error {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
		if r.Error != "" {
			return errors.New(r.Error)
		}
		return nil
	}

	deadline := time.Now().Add(cfg.wait)
	for h.open() < int64(cfg.conns) {
		if time.Now().After(deadline) {
			r.Conns = h.open()
			r.Error = fmt.Sprintf("only %d of %d connections open after %v", r.Conns, cfg.conns, cfg.wait)
			return emit()
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "hbbench: %d connections open; settling for %v\n", cfg.conns, cfg.settle)
	time.Sleep(cfg.settle)

	h.watch(true)
	closes0 := h.closes.Load()
	c0, err := cpuTime()
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(cfg.window)
	c1, err := cpuTime()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	r.Cut = h.closes.Load() - closes0
	h.watch(false)
	r.Conns = h.open()
	r.Goroutines = runtime.NumGoroutine()

	mN, err := measureMemory() // after the window: the GCs are not in the CPU time
	if err != nil {
		return err
	}
	r.Seconds = secs
	r.CPUSeconds = (c1 - c0).Seconds()
	r.CPUPercent = r.CPUSeconds / secs * 100
	r.HeapInuseN, r.HeapAllocN, r.RSSN = mN.heapInuse, mN.heapAlloc, mN.rss
	if n := float64(r.Conns); n > 0 {
		r.CPUMicrosPerConn = r.CPUSeconds / secs / n * 1e6
		r.HeapInusePerConn = (float64(mN.heapInuse) - float64(m0.heapInuse)) / n
		r.HeapAllocPerConn = (float64(mN.heapAlloc) - float64(m0.heapAlloc)) / n
		r.StackPerConn = (float64(mN.stackInuse) - float64(m0.stackInuse)) / n
		r.RSSPerConn = (float64(mN.rss) - float64(m0.rss)) / n
	}
	h.mu.Lock()
	r.FirstCut = h.firstCut
	h.mu.Unlock()
	return emit()
}
