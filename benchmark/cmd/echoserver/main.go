// Command echoserver serves one of the benchmark's echo servers (see package servers).
//
//	echoserver -lib gws -addr 127.0.0.1:9001 -debug 127.0.0.1:9101
//
// It prints one line, "echoserver pid=P lib=NAME addr=HOST:PORT debug=HOST:PORT", once it
// listens, and runs until SIGINT or SIGTERM.
//
// With -debug it also serves, on that second address:
//
//	/debug/stats        JSON: pid, goroutines, heap_inuse, heap_alloc, heap_objects, mallocs,
//	                    frees, num_gc, sys, rss_kb; ?gc=N runs N garbage collections first
//	                    (at most 5; for idle memory: the second one also empties sync.Pools);
//	                    ?peak=start resets the peaks and samples the heap every millisecond,
//	                    ?peak=stop stops and adds heap_inuse_peak and rss_peak_kb (VmHWM)
//	/debug/pprof/...    the standard net/http/pprof handlers
//
// Sending SIGUSR1 prints the same stats as a JSON line on stdout. -memprofilerate 1 makes
// /debug/pprof/heap exact (every allocation sampled) for per-connection memory breakdowns.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	rpprof "runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/gustws/gust/benchmark/servers"
)

func main() {
	lib := flag.String("lib", "", "server to run (see -list)")
	addr := flag.String("addr", "127.0.0.1:9001", "listen address (loopback)")
	debug := flag.String("debug", "", "address for the /debug/stats and /debug/pprof endpoint (off when empty)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file until the server stops")
	list := flag.Bool("list", false, "list the servers and exit")
	memRate := flag.Int("memprofilerate", 0, "runtime.MemProfileRate (0: Go's default, one sample per 512 KiB; 1: every allocation, for exact heap profiles)")
	flag.Parse()
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate
	}

	if *list {
		for _, n := range servers.Names() {
			fmt.Printf("%-11s %s\n", n, servers.Doc(n))
		}
		return
	}
	if *lib == "" {
		fmt.Fprintln(os.Stderr, "echoserver: -lib is required; one of", strings.Join(servers.Names(), ", "))
		os.Exit(2)
	}
	raiseNoFile()

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := rpprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() {
			rpprof.StopCPUProfile()
			f.Close()
		}()
	}

	srv, err := servers.Start(*lib, *addr)
	if err != nil {
		fatal(err)
	}
	debugAddr := "-"
	if *debug != "" {
		ln, err := net.Listen("tcp", *debug)
		if err != nil {
			fatal(err)
		}
		debugAddr = ln.Addr().String()
		go func() { _ = http.Serve(ln, debugMux()) }()
	}
	fmt.Printf("echoserver pid=%d lib=%s addr=%s debug=%s\n", os.Getpid(), *lib, srv.Addr(), debugAddr)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	for s := range sig {
		if s == syscall.SIGUSR1 {
			b, _ := json.Marshal(readStats(0))
			fmt.Println(string(b))
			continue
		}
		break
	}
	_ = srv.Close()
}

// Stats is what /debug/stats returns.
type Stats struct {
	PID         int    `json:"pid"`
	Goroutines  int    `json:"goroutines"`
	HeapInuse   uint64 `json:"heap_inuse"`
	HeapAlloc   uint64 `json:"heap_alloc"`
	HeapObjects uint64 `json:"heap_objects"`
	Mallocs     uint64 `json:"mallocs"`
	Frees       uint64 `json:"frees"`
	NumGC       uint32 `json:"num_gc"`
	Sys         uint64 `json:"sys"`
	RSSKB       int64  `json:"rss_kb"`

	// With ?peak=stop: the largest HeapInuse sampled since ?peak=start, and the kernel's
	// peak RSS since then (VmHWM, reset through /proc/self/clear_refs).
	HeapInusePeak uint64 `json:"heap_inuse_peak,omitempty"`
	RSSPeakKB     int64  `json:"rss_peak_kb,omitempty"`
	PeakSamples   int    `json:"peak_samples,omitempty"`
}

// readStats reads the runtime's statistics after gcs garbage collections.
func readStats(gcs int) Stats {
	for range gcs {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return Stats{
		PID: os.Getpid(), Goroutines: runtime.NumGoroutine(),
		HeapInuse: m.HeapInuse, HeapAlloc: m.HeapAlloc, HeapObjects: m.HeapObjects,
		Mallocs: m.Mallocs, Frees: m.Frees, NumGC: m.NumGC, Sys: m.Sys, RSSKB: rssKB(),
	}
}

func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		gcs, _ := strconv.Atoi(r.URL.Query().Get("gc"))
		var peak peakStats
		switch r.URL.Query().Get("peak") {
		case "start":
			if err := peaks.start(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		case "stop":
			peak = peaks.stop()
		}
		s := readStats(min(max(gcs, 0), 5))
		s.HeapInusePeak, s.RSSPeakKB, s.PeakSamples = peak.heap, peak.rssKB, peak.samples
		_ = json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func rssKB() int64 { return statusKB("VmRSS:") }

// statusKB reads a field of /proc/self/status given in kB (VmRSS:, VmHWM:).
func statusKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// raiseNoFile lifts the descriptor limit to its hard maximum (Go does this too since 1.19; the
// explicit call also covers a hard limit below what the idle scenario needs when run as root).
func raiseNoFile() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	const want = 1 << 20
	if lim.Max < want {
		try := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try) == nil {
			return
		}
	}
	lim.Cur = lim.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "echoserver:", err)
	os.Exit(1)
}
