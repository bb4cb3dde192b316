// Command h2bench compares N WebSockets multiplexed on one HTTP/2
// connection (RFC 8441 extended CONNECT) with N WebSockets on N HTTP/1.1
// connections, both over TLS to the same gust server: gust's Upgrader
// behind net/http, echoing, in a process of its own (this binary with
// -role server, started with GODEBUG=http2xconnect=1 and, with -pin, on
// CPU 0 while the client runs on CPU 1).
//
// For each mode and each N it reports the echo rate (binary messages of
// -size bytes, -w in flight per WebSocket, every echo checked), the
// server's Go heap (HeapInuse after two GCs) and RSS per WebSocket — idle
// after the handshakes, and again after the load, the connections still
// open — and the TCP connections the server accepted.
//
//	cd benchmark && go run ./cmd/h2bench                 # N = 100 and 1000, 5 s each
//	go run ./cmd/h2bench -n 10,100,1000 -T 10s -runs 3 -w 4 -size 64
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type options struct {
	ns      []int
	modes   []string
	T       time.Duration
	warmup  time.Duration
	window  int
	size    int
	runs    int
	pin     bool
	jsonOut bool
	hold    time.Duration
}

func main() {
	role := flag.String("role", "", "internal: 'server' runs the echo server")
	addr := flag.String("addr", "127.0.0.1:0", "server role: address to listen on (TLS)")
	debugAddr := flag.String("debug", "127.0.0.1:0", "server role: address of the /stats port (plain HTTP)")
	maxStreams := flag.Int("max-streams", 10000, "server role: HTTP/2 MaxConcurrentStreams")
	ns := flag.String("n", "100,1000", "WebSocket counts, comma-separated")
	modes := flag.String("modes", "h2,h1", "h2: all WebSockets on one HTTP/2 connection; h1: one HTTP/1.1 connection each")
	T := flag.Duration("T", 5*time.Second, "measured duration of each run")
	warmup := flag.Duration("warmup", time.Second, "load before the measured duration")
	window := flag.Int("w", 4, "messages in flight per WebSocket")
	size := flag.Int("size", 64, "message size in bytes (binary; at least 8)")
	runs := flag.Int("runs", 1, "runs per mode and N; the table shows the median")
	_, tasksetErr := exec.LookPath("taskset")
	pin := flag.Bool("pin", tasksetErr == nil && runtime.NumCPU() >= 2, "server on CPU 0 (taskset), client on CPU 1")
	jsonOut := flag.Bool("json", false, "print one JSON object per run too")
	hold := flag.Duration("hold", 0, "pause this long once the WebSockets are open and idle (to read the server's /debug/pprof)")
	flag.Parse()

	if *role == "server" {
		if err := runServer(*addr, *debugAddr, *maxStreams); err != nil {
			fmt.Fprintln(os.Stderr, "h2bench server:", err)
			os.Exit(1)
		}
		return
	}
	o := options{T: *T, warmup: *warmup, window: *window, size: *size, runs: *runs, pin: *pin, jsonOut: *jsonOut, hold: *hold}
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			usage("bad -n %q", *ns)
		}
		o.ns = append(o.ns, n)
	}
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "h1" && m != "h2" {
			usage("bad mode %q (want h1 or h2)", m)
		}
		o.modes = append(o.modes, strings.TrimSpace(m))
	}
	if o.size < 8 || o.window < 1 || o.runs < 1 || o.T <= 0 {
		usage("need -size ≥ 8, -w ≥ 1, -runs ≥ 1, -T > 0")
	}
	if err := drive(o); err != nil {
		fmt.Fprintln(os.Stderr, "h2bench: FAIL:", err)
		os.Exit(1)
	}
}

func usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "h2bench: "+format+"\n", args...)
	os.Exit(2)
}

// result is one run.
type result struct {
	Mode            string  `json:"mode"`
	N               int     `json:"n"`
	TCP             int64   `json:"tcp_connections"`
	OverHTTP2       int64   `json:"websockets_http2"`
	MsgPerSec       float64 `json:"msg_per_sec"`
	HeapIdleKB      float64 `json:"heap_idle_kib_per_ws"`
	RSSIdleKB       float64 `json:"rss_idle_kib_per_ws"`
	HeapLoadedKB    float64 `json:"heap_after_load_kib_per_ws"`
	RSSLoadedKB     float64 `json:"rss_after_load_kib_per_ws"`
	GoroutinesPerWS float64 `json:"server_goroutines_per_ws"`
	ServerCPU       float64 `json:"server_cpu_percent"` // during the measured duration
	ClientCPU       float64 `json:"client_cpu_percent"`
	ServerCPUPerMsg float64 `json:"server_cpu_us_per_msg"`
	ClientCPUPerMsg float64 `json:"client_cpu_us_per_msg"`
	ConnectSeconds  float64 `json:"connect_seconds"`
}

func drive(o options) error {
	if o.pin {
		// This process and its threads on CPU 1; the server starts on CPU 0.
		if out, err := exec.Command("taskset", "-a", "-p", "-c", "1", strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset: %v: %s", err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	load0 := loadAvg()
	var all []result
	for _, n := range o.ns {
		for _, mode := range o.modes {
			for run := range o.runs {
				r, err := runOne(self, o, mode, n)
				if err != nil {
					return fmt.Errorf("%s, N=%d, run %d: %w", mode, n, run+1, err)
				}
				fmt.Fprintf(os.Stderr, "h2bench: %s N=%d run %d: %.0f msg/s (server CPU %.0f %%, client %.0f %%), %d TCP, "+
					"heap %.1f KiB/WS, RSS %.1f KiB/WS idle\n",
					mode, n, run+1, r.MsgPerSec, r.ServerCPU, r.ClientCPU, r.TCP, r.HeapIdleKB, r.RSSIdleKB)
				if o.jsonOut {
					b, _ := json.Marshal(r)
					fmt.Println(string(b))
				}
				all = append(all, r)
			}
		}
	}
	fmt.Print(table(o, all))
	fmt.Printf("\nLoad average (1 min) at the start %s, at the end %s, on %d CPUs.\n", load0, loadAvg(), runtime.NumCPU())
	return nil
}

// loadAvg is the 1-minute load average, from /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b) + " ?")[0]
}

// table is the median of each mode and N's runs, as markdown.
func table(o options, all []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d-byte binary messages, %d in flight per WebSocket, %v measured after %v of warm-up, "+
		"median of %d run(s); server: gust Upgrader on net/http over TLS", o.size, o.window, o.T, o.warmup, o.runs)
	if o.pin {
		b.WriteString(", pinned to CPU 0, client on CPU 1")
	}
	b.WriteString(".\n\n| mode | WebSockets | TCP connections | msg/s | server CPU µs / msg | client CPU µs / msg | " +
		"heap KiB / WS | RSS KiB / WS | heap KiB / WS after load | RSS KiB / WS after load | server goroutines / WS |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range o.ns {
		for _, mode := range o.modes {
			var rs []result
			for _, r := range all {
				if r.Mode == mode && r.N == n {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			med := func(f func(result) float64) float64 {
				v := make([]float64, len(rs))
				for i, r := range rs {
					v[i] = f(r)
				}
				sort.Float64s(v)
				return v[len(v)/2]
			}
			name := map[string]string{"h2": "HTTP/2, one connection", "h1": "HTTP/1.1, one connection each"}[mode]
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", name, n, rs[0].TCP,
				med(func(r result) float64 { return r.MsgPerSec }),
				med(func(r result) float64 { return r.ServerCPUPerMsg }),
				med(func(r result) float64 { return r.ClientCPUPerMsg }),
				med(func(r result) float64 { return r.HeapIdleKB }),
				med(func(r result) float64 { return r.RSSIdleKB }),
				med(func(r result) float64 { return r.HeapLoadedKB }),
				med(func(r result) float64 { return r.RSSLoadedKB }),
				med(func(r result) float64 { return r.GoroutinesPerWS }))
		}
	}
	return b.String()
}

// serverProc is the server role running in a child process.
type serverProc struct {
	cmd   *exec.Cmd
	addr  string
	debug string
	done  chan error
}

func startServer(self string, o options, n int) (*serverProc, error) {
	args := []string{self, "-role", "server", "-max-streams", strconv.Itoa(n + 100)}
	if o.pin {
		args = append([]string{"taskset", "-c", "0"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	godebug := os.Getenv("GODEBUG")
	if !strings.Contains(godebug, "http2xconnect=1") {
		if godebug != "" {
			godebug += ","
		}
		godebug += "http2xconnect=1"
	}
	cmd.Env = append(os.Environ(), "GODEBUG="+godebug) // os/exec keeps the last value
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &serverProc{cmd: cmd, done: make(chan error, 1)}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
		s.done <- cmd.Wait()
	}()
	select {
	case l, ok := <-line:
		if !ok {
			return nil, errors.New("the server exited before listening")
		}
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				s.addr = v
			}
			if v, ok := strings.CutPrefix(f, "debug="); ok {
				s.debug = v
			}
		}
	case <-time.After(30 * time.Second):
		s.kill()
		return nil, errors.New("the server did not start within 30 s")
	}
	if s.addr == "" || s.debug == "" {
		s.kill()
		return nil, errors.New("the server printed no address")
	}
	return s, nil
}

func (s *serverProc) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

func (s *serverProc) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return errors.New("the server did not stop within 10 s of SIGTERM")
	}
}

func (s *serverProc) stats(gcs int) (*serverStats, error) {
	cl := http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://%s/stats?gc=%d", s.debug, gcs))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st serverStats
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// settledStats waits a little for the server to go quiet, then reads its
// stats after two GCs (the second empties the sync.Pool victim caches).
func (s *serverProc) settledStats() (*serverStats, error) {
	time.Sleep(300 * time.Millisecond)
	return s.stats(2)
}

func runOne(self string, o options, mode string, n int) (r result, err error) {
	r = result{Mode: mode, N: n}
	srv, err := startServer(self, o, n)
	if err != nil {
		return r, err
	}
	defer func() {
		if serr := srv.stop(); serr != nil && err == nil {
			err = fmt.Errorf("server: %w", serr)
		}
	}()
	// Every network wait of the run ends by this deadline at the latest.
	ctx, cancel := context.WithTimeout(context.Background(), o.warmup+o.T+3*time.Minute)
	defer cancel()

	base, err := srv.settledStats()
	if err != nil {
		return r, err
	}
	if !base.ExtendedConnect {
		return r, errors.New("the server runs without GODEBUG=http2xconnect=1")
	}

	// Connect, 64 handshakes at a time.
	start := time.Now()
	conns := make([]*wsConn, n)
	var h2 *h2Client
	if mode == "h2" {
		if h2, err = dialH2(ctx, srv.addr); err != nil {
			return r, err
		}
		defer h2.Close()
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 64)
	)
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var c *wsConn
			var err error
			if mode == "h2" {
				c, err = h2.open(ctx)
			} else {
				c, err = dialH1(ctx, srv.addr)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	if len(errs) > 0 {
		return r, fmt.Errorf("%d of %d WebSockets failed to open, first: %w", len(errs), n, errs[0])
	}
	r.ConnectSeconds = time.Since(start).Seconds()

	idle, err := srv.settledStats()
	if err != nil {
		return r, err
	}
	if idle.WebSocketsOpen != int64(n) {
		return r, fmt.Errorf("the server has %d WebSockets open, want %d", idle.WebSocketsOpen, n)
	}
	r.TCP = idle.TCPAccepted
	r.OverHTTP2 = idle.WebSocketsHTTP2
	perWS := func(after, before int64) float64 { return float64(after-before) / 1024 / float64(n) }
	r.HeapIdleKB = perWS(int64(idle.HeapInuse), int64(base.HeapInuse))
	r.RSSIdleKB = float64(idle.RSSKB-base.RSSKB) / float64(n)
	r.GoroutinesPerWS = float64(idle.Goroutines-base.Goroutines) / float64(n)
	if o.hold > 0 {
		fmt.Fprintf(os.Stderr, "h2bench: %s N=%d: holding %v, idle; server pprof at http://%s/debug/pprof/\n",
			mode, n, o.hold, srv.debug)
		time.Sleep(o.hold)
	}

	// Load.
	var echoed atomic.Int64
	stop := make(chan struct{})
	loadErrs := make(chan error, n)
	for _, c := range conns {
		go func() { loadErrs <- c.load(o.window, o.size, stop, &echoed) }()
	}
	failed := func() error {
		select {
		case err := <-loadErrs:
			return fmt.Errorf("a WebSocket failed under load: %v", err)
		default:
			return nil
		}
	}
	time.Sleep(o.warmup)
	s0, err := srv.stats(0)
	if err != nil {
		close(stop)
		return r, err
	}
	c0, t0, cpu0 := echoed.Load(), time.Now(), cpuSeconds()
	time.Sleep(o.T)
	c1, t1, cpu1 := echoed.Load(), time.Now(), cpuSeconds()
	s1, err := srv.stats(0)
	if err != nil {
		close(stop)
		return r, err
	}
	r.ServerCPU = 100 * (s1.CPUSeconds - s0.CPUSeconds) / t1.Sub(t0).Seconds()
	r.ClientCPU = 100 * (cpu1 - cpu0) / t1.Sub(t0).Seconds()
	if c1 > c0 {
		r.ServerCPUPerMsg = 1e6 * (s1.CPUSeconds - s0.CPUSeconds) / float64(c1-c0)
		r.ClientCPUPerMsg = 1e6 * (cpu1 - cpu0) / float64(c1-c0)
	}
	if err := failed(); err != nil {
		close(stop)
		return r, err
	}
	close(stop)
	r.MsgPerSec = float64(c1-c0) / t1.Sub(t0).Seconds()
	for range n {
		select {
		case err := <-loadErrs:
			if err != nil {
				return r, fmt.Errorf("a WebSocket failed under load: %v", err)
			}
		case <-ctx.Done():
			return r, errors.New("the load did not drain in time")
		}
	}

	loaded, err := srv.settledStats()
	if err != nil {
		return r, err
	}
	r.HeapLoadedKB = perWS(int64(loaded.HeapInuse), int64(base.HeapInuse))
	r.RSSLoadedKB = float64(loaded.RSSKB-base.RSSKB) / float64(n)
	if loaded.Messages < c1 {
		return r, fmt.Errorf("the server echoed %d messages, the client counted %d", loaded.Messages, c1)
	}

	// Close every WebSocket with the closing handshake.
	closeErrs := make(chan error, n)
	for i, c := range conns {
		conns[i] = nil
		go func() { closeErrs <- c.closeHandshake() }()
	}
	for range n {
		if err := <-closeErrs; err != nil {
			return r, fmt.Errorf("closing handshake: %w", err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := srv.stats(0)
		if err != nil {
			return r, err
		}
		if st.WebSocketsOpen == 0 {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d WebSockets still open on the server 10 s after closing", st.WebSocketsOpen)
		}
	}
	if want := map[string]int64{"h2": 1, "h1": int64(n)}[mode]; r.TCP != want {
		return r, fmt.Errorf("the server accepted %d TCP connections, want %d", r.TCP, want)
	}
	if want := map[string]int64{"h2": int64(n), "h1": 0}[mode]; r.OverHTTP2 != want {
		return r, fmt.Errorf("%d WebSockets came over HTTP/2, want %d", r.OverHTTP2, want)
	}
	return r, nil
}
