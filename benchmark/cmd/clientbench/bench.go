package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// payload is one of the study's message kinds.
type payload struct {
	name  string
	title string
	op    byte // 1 text, 2 binary
	data  []byte
}

// imageSize is the study's "Large Binary (Image - 234KB)": 234 KiB of bytes that look like a
// JPEG's to anything but a decoder (pseudo-random, incompressible, from a fixed seed).
const imageSize = 234 << 10

var payloadNames = []string{"small-text", "small-binary", "large-text", "large-binary", "binary-234k"}

func loadPayloads(dir string, names []string) ([]payload, error) {
	read := func(file string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, file)) }
	var out []payload
	for _, name := range names {
		var p payload
		var err error
		switch name {
		case "small-text", "small-binary":
			p.data, err = read("client-small.json")
			p.title = "Small JSON"
		case "large-text", "large-binary":
			p.data, err = read("client-large.json")
			p.title = "Large JSON"
		case "binary-234k":
			p.data = image()
			p.title = "234 KiB binary (an image's size)"
		default:
			return nil, fmt.Errorf("unknown payload %q (have %s)", name, strings.Join(payloadNames, ", "))
		}
		if err != nil {
			return nil, err
		}
		p.name, p.op = name, 2
		if strings.HasSuffix(name, "-text") {
			p.op = 1
			p.title += " — text"
		} else if strings.HasSuffix(name, "-binary") {
			p.title += " — binary"
		}
		p.title = fmt.Sprintf("%s, %s", p.title, sizeString(len(p.data)))
		out = append(out, p)
	}
	return out, nil
}

func sizeString(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%s bytes", commas(n))
	}
	return fmt.Sprintf("%d bytes", n)
}

func image() []byte {
	r := rand.New(rand.NewPCG(234, 1024))
	b := make([]byte, imageSize)
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	copy(b, []byte{0xff, 0xd8, 0xff, 0xe0}) // a JPEG's first bytes, for the look of it
	return b
}

// sample is one timed run.
type sample struct {
	Client  string  `json:"client"`
	Payload string  `json:"payload"`
	N       int     `json:"n"`
	Dir     string  `json:"dir"` // "out", "in" or "in-first" (In from the first message's delivery)
	Rep     int     `json:"rep"`
	Ms      float64 `json:"ms"`
	// per message, in the client process during the timed part (from /proc/self/io and
	// runtime/metrics): read and write system calls, heap allocations
	ReadsPerMsg  float64 `json:"reads_per_msg"`
	WritesPerMsg float64 `json:"writes_per_msg"`
	AllocsPerMsg float64 `json:"allocs_per_msg"`
}

type benchConfig struct {
	url       string
	clients   []string
	payloads  []payload
	counts    []int
	reps      int
	warmup    int           // messages each way on a fresh connection before the timed runs
	opTimeout time.Duration // a timed run longer than this fails the whole benchmark
	progress  func(string, ...any)
	onSample  func(sample)
}

// runBench runs every cell: for each payload and count, reps rounds; each round takes every
// client in turn (the order rotating from round to round), and each client dials, loads the
// payload, warms up, runs Out, then In, and closes.
func runBench(cfg benchConfig) ([]sample, error) {
	var all []sample
	for _, p := range cfg.payloads {
		for _, n := range cfg.counts {
			for rep := 1; rep <= cfg.reps; rep++ {
				for i := range cfg.clients {
					name := cfg.clients[(i+rep-1)%len(cfg.clients)]
					ss, err := runOnce(cfg, name, p, n, rep)
					if err != nil {
						return all, fmt.Errorf("%s, %s, N=%d, round %d: %w", name, p.name, n, rep, err)
					}
					for _, s := range ss {
						if cfg.onSample != nil {
							cfg.onSample(s)
						}
						all = append(all, s)
					}
				}
			}
			if cfg.progress != nil {
				cfg.progress("clientbench: %s N=%d: %s", p.name, n, cellSummary(all, p.name, n, cfg.clients))
			}
		}
	}
	return all, nil
}

func runOnce(cfg benchConfig, name string, p payload, n, rep int) ([]sample, error) {
	c, err := dial(name, cfg.url)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			c.close()
		}
	}()
	if err := c.write(1, []byte("load")); err != nil {
		return nil, err
	}
	if err := c.write(p.op, p.data); err != nil {
		return nil, err
	}
	if s, _, err := c.readText(); err != nil || s != "ok" {
		return nil, answerError("load", s, err)
	}
	if w := min(n, cfg.warmup); w > 0 {
		if _, err := out(c, p, w); err != nil {
			return nil, fmt.Errorf("warm-up out: %w", err)
		}
		if _, _, err := in(c, p, w); err != nil {
			return nil, fmt.Errorf("warm-up in: %w", err)
		}
	}
	var res []sample
	for _, dir := range []string{"out", "in"} {
		runtime.GC()
		before := counters()
		watchdog := time.AfterFunc(cfg.opTimeout, func() {
			fmt.Fprintf(os.Stderr, "clientbench: FAIL: %s %s %s N=%d took more than %v\n", name, p.name, dir, n, cfg.opTimeout)
			os.Exit(1)
		})
		var d, fromFirst time.Duration
		if dir == "out" {
			d, err = out(c, p, n)
		} else {
			d, fromFirst, err = in(c, p, n)
		}
		watchdog.Stop()
		after := counters()
		after.syscr -= counterCost.syscr
		after.syscw -= counterCost.syscw
		after.allocs -= counterCost.allocs
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		fn := float64(n)
		s := sample{
			Client: name, Payload: p.name, N: n, Dir: dir, Rep: rep,
			Ms:           float64(d.Nanoseconds()) / 1e6,
			ReadsPerMsg:  float64(after.syscr-before.syscr) / fn,
			WritesPerMsg: float64(after.syscw-before.syscw) / fn,
			AllocsPerMsg: float64(after.allocs-before.allocs) / fn,
		}
		res = append(res, s)
		if dir == "in" {
			s.Dir, s.Ms = "in-first", float64(fromFirst.Nanoseconds())/1e6
			res = append(res, s)
		}
	}
	closed = true
	if err := c.close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	return res, nil
}

func answerError(cmd, got string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return fmt.Errorf("%s: server answered %q", cmd, got)
}

// out is the Out measurement: from just before the first of n messages is written until the
// client has the server's "done N", which the server sends once it has read all n.
func out(c wsClient, p payload, n int) (time.Duration, error) {
	arg := strconv.Itoa(n)
	if err := c.write(1, []byte("out "+arg)); err != nil {
		return 0, err
	}
	if s, _, err := c.readText(); err != nil || s != "go" {
		return 0, answerError("out", s, err)
	}
	start := time.Now()
	for range n {
		if err := c.write(p.op, p.data); err != nil {
			return 0, err
		}
	}
	s, end, err := c.readText()
	if err != nil || s != "done "+arg {
		return 0, answerError("out", s, err)
	}
	return end.Sub(start), nil
}

// in is the In measurement: from just before the client writes "in N" until the library has
// delivered the n-th message to the application. fromFirst is the study's own measure: from the
// delivery of the first message to that of the n-th.
func in(c wsClient, p payload, n int) (total, fromFirst time.Duration, err error) {
	c.expect(n, p.op, p.data)
	start := time.Now()
	if err := c.write(1, []byte("in "+strconv.Itoa(n))); err != nil {
		return 0, 0, err
	}
	first, end, err := c.wait()
	if err != nil {
		return 0, 0, err
	}
	return end.Sub(start), end.Sub(first), nil
}

type counterSet struct {
	syscr, syscw int64
	allocs       uint64
}

// counterCost is what one call of counters adds to the counts, subtracted from every sample.
var counterCost = func() counterSet {
	a := counters()
	b := counters()
	return counterSet{b.syscr - a.syscr, b.syscw - a.syscw, b.allocs - a.allocs}
}()

var allocMetric = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}

// counters reads the process's read and write system call counts and its heap allocations.
func counters() counterSet {
	var cs counterSet
	if f, err := os.Open("/proc/self/io"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "syscr":
				cs.syscr = n
			case "syscw":
				cs.syscw = n
			}
		}
		f.Close()
	}
	metrics.Read(allocMetric)
	if allocMetric[0].Value.Kind() == metrics.KindUint64 {
		cs.allocs = allocMetric[0].Value.Uint64()
	}
	return cs
}
