// Command benchreport turns the JSON lines that scripts/bench collects (one gustload result
// per line, wrapped with its scenario and run) into a Markdown report with a table per
// scenario and an SVG bar chart per scenario, and optionally points benchmark/README.md at it.
//
//	benchreport -in results/2026-11-23.jsonl -md results/2026-11-23.md -readme README.md
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// line is one record written by scripts/bench.
type line struct {
	Scenario string `json:"scenario"`
	Server   string `json:"server"`
	Run      int    `json:"run"`
	Result   result `json:"result"`
}

// result holds the gustload fields the report uses (see internal/load.Result).
type result struct {
	Error         string  `json:"error"`
	Messages      int64   `json:"messages"`
	Seconds       float64 `json:"seconds"`
	MsgPerSec     float64 `json:"msg_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	LatMinMs      float64 `json:"lat_min_ms"`
	LatAvgMs      float64 `json:"lat_avg_ms"`
	LatP50Ms      float64 `json:"lat_p50_ms"`
	LatP99Ms      float64 `json:"lat_p99_ms"`
	LatMaxMs      float64 `json:"lat_max_ms"`
	ClientCPU     float64 `json:"client_cpu_percent"`
	CPUPercent    float64 `json:"server_cpu_percent"`
	CPUPerMillion float64 `json:"server_cpu_s_per_million"`
	CPUSeconds    float64 `json:"server_cpu_seconds"`
	AllocsPerMsg  float64 `json:"server_allocs_per_msg"`
	RSSAfterKB    float64 `json:"server_rss_after_kb"`
	RSSPerConn    float64 `json:"rss_per_conn_kb"`
	HeapPerConn   float64 `json:"heap_per_conn_kb"`
	HeapSettled   float64 `json:"heap_settled_per_conn_kb"`
	HeapLive      float64 `json:"heap_live_per_conn_kb"`
	DeflateIn     float64 `json:"deflate_in_ratio"`
	DeflateOut    float64 `json:"deflate_out_ratio"`
	Deflate       string  `json:"deflate"`
	GoroutinesPer float64 `json:"goroutines_per_conn"`
	PeakHeap      float64 `json:"peak_heap_per_conn_kb"`
	PeakRSS       float64 `json:"peak_rss_per_conn_kb"`
	Conns         int     `json:"conns"`
	Window        int     `json:"window"`
	Payload       int     `json:"payload_bytes"`
	Binary        bool    `json:"binary"`
}

// scenario describes how a scenario is reported.
type scenario struct {
	id, title string
	metric    string // the charted figure's name
	unit      string
	value     func(r result) float64
	lowerWins bool
	base      string // the server the "×" columns divide by (default gws)
	// aside, when set, adds to a bar's label in the chart (a figure the bar does not show).
	aside func(a *agg) string
}

var scenarios = []scenario{
	{"a", "1 connection, 300-byte text, 256 in flight", "msg/s", "msg/s", func(r result) float64 { return r.MsgPerSec }, false, "", nil},
	{"b", "200 connections, 2,396-byte text, 16 in flight each", "msg/s", "msg/s", func(r result) float64 { return r.MsgPerSec }, false, "", nil},
	{"c", "1,000 connections, 1 KiB text, one in flight (request/response)", "msg/s", "msg/s", func(r result) float64 { return r.MsgPerSec }, false, "", nil},
	{"c5", "5,000 connections, 1 KiB text, one in flight (request/response)", "msg/s", "msg/s", func(r result) float64 { return r.MsgPerSec }, false, "", nil},
	{"c20", "19,500 connections, 1 KiB text, one in flight (request/response; one process may hold 20,000 descriptors)", "msg/s", "msg/s", func(r result) float64 { return r.MsgPerSec }, false, "", nil},
	{"l5", "5,000 connections, 1 KiB text, one in flight, 8 a second each: request/response at a fixed 40,000 msg/s, below saturation", "p99 ms", "ms",
		func(r result) float64 { return r.LatP99Ms }, true, "gust", nil},
	{"l20", "19,500 connections, 1 KiB text, one in flight, 2 a second each: request/response at a fixed 39,000 msg/s, below saturation", "p99 ms", "ms",
		func(r result) float64 { return r.LatP99Ms }, true, "gust", nil},
	{"d", "1 connection, 1 MiB binary, 4 in flight", "MB/s", "MB/s", func(r result) float64 { return r.MBPerSec }, false, "", nil},
	{"dt", "1 connection, 1 MiB text (UTF-8 validated), 4 in flight", "MB/s", "MB/s", func(r result) float64 { return r.MBPerSec }, false, "", nil},
	{"e", "10,000 idle connections after the handshake", "heap KiB per connection", "KiB", func(r result) float64 { return r.HeapPerConn }, true, "", nil},
	{"et", "10,000 idle TLS connections after the handshake", "heap KiB per connection", "KiB", func(r result) float64 { return r.HeapPerConn }, true, "gust-tls", nil},
	{"f", "request/response, 600 in flight over 4 connections, 1 KiB (sockety-style QPS)", "QPS", "QPS", func(r result) float64 { return r.MsgPerSec }, false, "", nil},
	{"z", "permessage-deflate echo, context takeover: 200 connections, 16 in flight each, 2 KiB JSON", "msg/s", "msg/s",
		func(r result) float64 { return r.MsgPerSec }, false, "gws-deflate", nil},
	{"y", "1,000 compressed connections (context takeover) that all echo one 2 KiB JSON at once, then idle", "heap KiB per connection after two GCs", "KiB",
		func(r result) float64 { return r.HeapSettled }, true, "gws-deflate",
		func(a *agg) string {
			return fmt.Sprintf("(%s after one GC, as in e)", num(a.median(func(r result) float64 { return r.HeapPerConn })))
		}},
}

func main() {
	in := flag.String("in", "", "JSON lines from scripts/bench")
	md := flag.String("md", "", "Markdown report to write (charts go beside it)")
	readme := flag.String("readme", "", "README whose results section should point at the report")
	machine := flag.String("machine", "", "a line describing the machine")
	command := flag.String("command", "", "the command that produced the results")
	flag.Parse()
	if *in == "" || *md == "" {
		fmt.Fprintln(os.Stderr, "usage: benchreport -in FILE.jsonl -md FILE.md [-readme README.md]")
		os.Exit(2)
	}
	lines, err := readLines(*in)
	if err != nil {
		fatal(err)
	}
	report, tables, err := write(lines, *md, *machine, *command)
	if err != nil {
		fatal(err)
	}
	if err := os.WriteFile(*md, []byte(report), 0o644); err != nil {
		fatal(err)
	}
	if *readme != "" {
		if err := updateReadme(*readme, *md, tables); err != nil {
			fatal(err)
		}
	}
}

func readLines(path string) ([]line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// agg is the runs of one server in one scenario.
type agg struct {
	server string
	runs   []result
	errs   []string
}

func (a *agg) ok() bool { return len(a.runs) > 0 && len(a.errs) == 0 }

// median is the middle run's value (the mean of the two middle ones for an
// even count): one slow or fast run does not move it, as it would a mean.
func (a *agg) median(f func(result) float64) float64 {
	if len(a.runs) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(a.runs))
	for i, r := range a.runs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func (a *agg) spread(f func(result) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range a.runs {
		lo, hi = math.Min(lo, f(r)), math.Max(hi, f(r))
	}
	return
}

// order puts gust first, then the peers, then the raw references.
func order(names []string) []string {
	rank := map[string]int{"gust": 0, "gws": 1, "gorilla": 2, "coder": 3, "gobwas": 4, "nbio": 5, "raw-record": 6, "raw-buf": 7, "raw-copy": 8,
		"gust-deflate": 0, "gust-netpoll-deflate": 0, "gust-metrics": 0, "gws-deflate": 1, "gws-deflate-w15": 1, "gorilla-deflate": 2,
		"gust-tls": 0, "gust-netpoll-tls": 0, "nbio-tls": 5}
	sort.SliceStable(names, func(i, j int) bool {
		ri, ok1 := rank[names[i]]
		rj, ok2 := rank[names[j]]
		if !ok1 {
			ri = 50
		}
		if !ok2 {
			rj = 50
		}
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names
}

func write(lines []line, mdPath, machine, command string) (string, map[string]string, error) {
	by := map[string]map[string]*agg{}
	for _, l := range lines {
		if by[l.Scenario] == nil {
			by[l.Scenario] = map[string]*agg{}
		}
		a := by[l.Scenario][l.Server]
		if a == nil {
			a = &agg{server: l.Server}
			by[l.Scenario][l.Server] = a
		}
		if l.Result.Error != "" {
			a.errs = append(a.errs, l.Result.Error)
		} else {
			a.runs = append(a.runs, l.Result)
		}
	}
	base := strings.TrimSuffix(filepath.Base(mdPath), ".md")
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results: %s\n\n", base)
	if machine != "" {
		fmt.Fprintf(&b, "Machine: %s  \n", machine)
	}
	if command != "" {
		fmt.Fprintf(&b, "Command: `%s`  \n", command)
	}
	b.WriteString("Server pinned to core 0 (`taskset -c 0`), gustload to core 1; each figure is the median of the runs, " +
		"the range in brackets when there were several. Ratios are of those medians, in the same run. " +
		"Server CPU is user+system time from /proc; allocations from the server's runtime.MemStats.\n\n")
	tables := map[string]string{}
	for _, sc := range scenarios {
		aggs := by[sc.id]
		if len(aggs) == 0 {
			continue
		}
		var names []string
		for n := range aggs {
			names = append(names, n)
		}
		names = order(names)
		if sc.id == "e" || sc.id == "et" || sc.id == "y" {
			for _, a := range aggs {
				if len(a.runs) > 0 {
					if sc.id == "e" {
						sc.title = fmt.Sprintf("%d idle connections after the handshake", a.runs[0].Conns)
					} else if sc.id == "et" {
						sc.title = fmt.Sprintf("%d idle TLS connections after the handshake", a.runs[0].Conns)
					} else {
						sc.title = fmt.Sprintf("%d compressed connections (context takeover) that all echo one %d-byte JSON at once, then idle",
							a.runs[0].Conns, a.runs[0].Payload)
					}
					break
				}
			}
		}
		svg := base + "-" + sc.id + ".svg"
		if err := os.WriteFile(filepath.Join(filepath.Dir(mdPath), svg), []byte(chart(sc, names, aggs)), 0o644); err != nil {
			return "", nil, err
		}
		t := table(sc, names, aggs)
		if n := negotiated(names, aggs); n != "" {
			t += "\n" + n
		}
		tables[sc.id] = t
		fmt.Fprintf(&b, "## %s. %s\n\n%s\n![%s](%s)\n\n", sc.id, sc.title, t, sc.id, svg)
	}
	return b.String(), tables, nil
}

func ratio(a, b *agg, f func(result) float64) string {
	if a == nil || b == nil || !a.ok() || !b.ok() {
		return "—"
	}
	d := b.median(f)
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a.median(f)/d)
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func withRange(a *agg, f func(result) float64) string {
	if !a.ok() {
		if len(a.errs) > 0 {
			return "error: " + strings.ReplaceAll(a.errs[0], "|", "/")
		}
		return "—"
	}
	s := num(a.median(f))
	if len(a.runs) > 1 {
		lo, hi := a.spread(f)
		s += fmt.Sprintf(" (%s–%s)", num(lo), num(hi))
	}
	return s
}

func table(sc scenario, names []string, aggs map[string]*agg) string {
	var b strings.Builder
	base := sc.base
	if base == "" {
		base = "gws"
	}
	gws, rawBuf, rawRec := aggs[base], aggs["raw-buf"], aggs["raw-record"]
	ms := func(f func(result) float64) func(*agg) string {
		return func(a *agg) string {
			if !a.ok() {
				return "—"
			}
			return fmt.Sprintf("%.2f", a.median(f))
		}
	}
	type col struct {
		head string
		cell func(*agg) string
	}
	main := col{sc.metric, func(a *agg) string { return withRange(a, sc.value) }}
	cpuPerM := col{"server CPU s / M msgs", func(a *agg) string {
		if !a.ok() {
			return "—"
		}
		return num(a.median(func(r result) float64 { return r.CPUPerMillion }))
	}}
	allocs := col{"allocs / msg", func(a *agg) string {
		if !a.ok() {
			return "—"
		}
		return fmt.Sprintf("%.2f", a.median(func(r result) float64 { return r.AllocsPerMsg }))
	}}
	xg := col{"× " + base, func(a *agg) string { return ratio(a, gws, sc.value) }}
	pct := func(head string, f func(result) float64) col {
		return col{head, func(a *agg) string {
			if !a.ok() {
				return "—"
			}
			return fmt.Sprintf("%.1f %%", 100*a.median(f))
		}}
	}
	cpuPct := func(head string, f func(result) float64) col {
		return col{head, func(a *agg) string {
			if !a.ok() {
				return "—"
			}
			return fmt.Sprintf("%.0f", a.median(f))
		}}
	}
	xb := col{"× raw-buf", func(a *agg) string { return ratio(a, rawBuf, sc.value) }}
	xr := col{"× raw-record", func(a *agg) string { return ratio(a, rawRec, sc.value) }}
	p50 := col{"p50 ms", ms(func(r result) float64 { return r.LatP50Ms })}
	p99 := col{"p99 ms", ms(func(r result) float64 { return r.LatP99Ms })}
	var cols []col
	switch sc.id {
	case "a", "b":
		cols = []col{main, xg, xb, cpuPerM, allocs, p50, p99}
	case "c", "c5", "c20":
		cols = []col{main, xg, xr, xb, cpuPerM, allocs, p50, p99}
	case "d", "dt":
		cpuPerGB := col{"server CPU s / GB", func(a *agg) string {
			if !a.ok() {
				return "—"
			}
			return num(a.median(func(r result) float64 {
				if r.MBPerSec == 0 {
					return math.NaN()
				}
				return r.CPUSeconds / (r.MBPerSec * r.Seconds / 1000)
			}))
		}}
		cols = []col{main, xg, xb, cpuPerGB, allocs, p50, p99}
	case "e":
		cols = []col{
			{"RSS KiB / conn", func(a *agg) string { return withRange(a, func(r result) float64 { return r.RSSPerConn }) }},
			{"heap KiB / conn", func(a *agg) string { return withRange(a, func(r result) float64 { return r.HeapPerConn }) }},
			{"heap × gws", func(a *agg) string { return ratio(a, gws, func(r result) float64 { return r.HeapPerConn }) }},
			{"RSS × gws", func(a *agg) string { return ratio(a, gws, func(r result) float64 { return r.RSSPerConn }) }},
			{"goroutines / conn", ms(func(r result) float64 { return r.GoroutinesPer })},
		}
	case "et":
		heap := func(r result) float64 { return r.HeapPerConn }
		rss := func(r result) float64 { return r.RSSPerConn }
		nbio := aggs["nbio-tls"]
		cols = []col{
			{"RSS KiB / conn", func(a *agg) string { return withRange(a, rss) }},
			{"heap KiB / conn", func(a *agg) string { return withRange(a, heap) }},
			{"RSS × " + base, func(a *agg) string { return ratio(a, gws, rss) }},
			{"heap × " + base, func(a *agg) string { return ratio(a, gws, heap) }},
			{"RSS × nbio-tls", func(a *agg) string { return ratio(a, nbio, rss) }},
			{"heap × nbio-tls", func(a *agg) string { return ratio(a, nbio, heap) }},
			{"goroutines / conn", ms(func(r result) float64 { return r.GoroutinesPer })},
		}
	case "z":
		cols = []col{main, xg, cpuPerM, allocs, p50, p99,
			pct("echo bytes on the wire", func(r result) float64 { return r.DeflateIn }),
			cpuPct("server CPU %", func(r result) float64 { return r.CPUPercent }),
			cpuPct("client CPU %", func(r result) float64 { return r.ClientCPU }),
		}
	case "y":
		heap := func(r result) float64 { return r.HeapPerConn }
		settled := func(r result) float64 { return r.HeapSettled }
		live := func(r result) float64 { return r.HeapLive }
		rss := func(r result) float64 { return r.RSSPerConn }
		peakHeap := func(r result) float64 { return r.PeakHeap }
		peakRSS := func(r result) float64 { return r.PeakRSS }
		w15 := aggs["gws-deflate-w15"]
		cols = []col{
			{"peak heap KiB / conn (echoes)", func(a *agg) string { return withRange(a, peakHeap) }},
			{"× gws-deflate-w15", func(a *agg) string { return ratio(a, w15, peakHeap) }},
			{"peak RSS KiB / conn", func(a *agg) string { return withRange(a, peakRSS) }},
			{"heap KiB / conn (1 GC)", func(a *agg) string { return withRange(a, heap) }},
			{"× " + base, func(a *agg) string { return ratio(a, gws, heap) }},
			{"heap KiB / conn (2 GCs)", func(a *agg) string { return withRange(a, settled) }},
			{"× " + base, func(a *agg) string { return ratio(a, gws, settled) }},
			{"live KiB / conn (2 GCs)", func(a *agg) string { return withRange(a, live) }},
			{"× " + base, func(a *agg) string { return ratio(a, gws, live) }},
			{"RSS KiB / conn", func(a *agg) string { return withRange(a, rss) }},
			{"RSS × " + base, func(a *agg) string { return ratio(a, gws, rss) }},
			{"RSS × gws-deflate-w15", func(a *agg) string { return ratio(a, w15, rss) }},
			{"goroutines / conn", ms(func(r result) float64 { return r.GoroutinesPer })},
		}
	case "l5", "l20":
		cols = []col{main, xg, p50,
			{"max ms", ms(func(r result) float64 { return r.LatMaxMs })},
			{"msg/s", func(a *agg) string { return withRange(a, func(r result) float64 { return r.MsgPerSec }) }},
			cpuPerM,
			cpuPct("server CPU %", func(r result) float64 { return r.CPUPercent }),
			cpuPct("client CPU %", func(r result) float64 { return r.ClientCPU }),
		}
	case "f":
		best := bestPeer(names, aggs, sc.value)
		cols = []col{main, xg,
			{"× best peer (" + best + ")", func(a *agg) string { return ratio(a, aggs[best], sc.value) }},
			{"min ms", ms(func(r result) float64 { return r.LatMinMs })},
			{"avg ms", ms(func(r result) float64 { return r.LatAvgMs })},
			{"max ms", ms(func(r result) float64 { return r.LatMaxMs })},
			cpuPct("server CPU %", func(r result) float64 { return r.CPUPercent }),
			cpuPct("client CPU %", func(r result) float64 { return r.ClientCPU }),
		}
	}
	b.WriteString("| server |")
	for _, c := range cols {
		b.WriteString(" " + c.head + " |")
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, n := range names {
		a := aggs[n]
		fmt.Fprintf(&b, "| %s |", n)
		for _, c := range cols {
			b.WriteString(" " + c.cell(a) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// negotiated lists what each server answered to gustload's permessage-deflate offer.
func negotiated(names []string, aggs map[string]*agg) string {
	var parts []string
	for _, n := range names {
		for _, r := range aggs[n].runs {
			if r.Deflate != "" {
				parts = append(parts, fmt.Sprintf("%s `%s`", n, r.Deflate))
				break
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Negotiated (Sec-WebSocket-Extensions answered to gustload's `permessage-deflate; client_max_window_bits`): " +
		strings.Join(parts, "; ") + ".\n"
}

// bestPeer is the library (not gust, not a raw reference) with the best median.
func bestPeer(names []string, aggs map[string]*agg, f func(result) float64) string {
	best, bv := "gws", math.Inf(-1)
	for _, n := range names {
		if n == "gust" || strings.HasPrefix(n, "gust-") || strings.HasPrefix(n, "raw-") || !aggs[n].ok() {
			continue
		}
		if v := aggs[n].median(f); v > bv {
			best, bv = n, v
		}
	}
	return best
}

// chart draws one horizontal bar per server, labelled with its value.
func chart(sc scenario, names []string, aggs map[string]*agg) string {
	width, right := 760, 110
	if sc.aside != nil {
		width, right = 900, 290 // room for the longer labels
	}
	const (
		left   = 130
		barH   = 22
		gap    = 8
		top    = 60
		bottom = 16
	)
	h := top + len(names)*(barH+gap) + bottom
	width = max(width, 20+8*len([]rune(fmt.Sprintf("%s. %s", sc.id, sc.title))))
	maxV := 0.0
	for _, n := range names {
		if a := aggs[n]; a.ok() {
			maxV = math.Max(maxV, a.median(sc.value))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", width, h, width, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("%s. %s", sc.id, sc.title)
	sub := sc.metric
	if sc.lowerWins {
		sub += " (lower is better)"
	}
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="10" y="41" font-size="12" fill="#555">%s</text>`+"\n", html.EscapeString(sub))
	for i, n := range names {
		a := aggs[n]
		y := top + i*(barH+gap)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH-6, html.EscapeString(n))
		if !a.ok() {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#b00">error</text>`+"\n", left+4, y+barH-6)
			continue
		}
		v := a.median(sc.value)
		w := 0.0
		if maxV > 0 {
			w = v / maxV * float64(width-left-right)
		}
		color := "#4a7bb7" // peers
		switch {
		case n == "gust" || strings.HasPrefix(n, "gust-"):
			color = "#d9822b"
		case strings.HasPrefix(n, "raw-"):
			color = "#9a9a9a"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, math.Max(w, 1), barH, color)
		label := num(v) + " " + sc.unit
		if sc.aside != nil {
			label += " " + sc.aside(a)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(left)+math.Max(w, 1)+6, y+barH-6, html.EscapeString(label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

const (
	beginMark = "<!-- results:begin -->"
	endMark   = "<!-- results:end -->"
)

// updateReadme replaces the README's results section with the latest tables and links.
func updateReadme(readme, mdPath string, tables map[string]string) error {
	b, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", readme, beginMark, endMark)
	}
	rel, err := filepath.Rel(filepath.Dir(readme), mdPath)
	if err != nil {
		rel = mdPath
	}
	base := strings.TrimSuffix(rel, ".md")
	var out strings.Builder
	fmt.Fprintf(&out, "%s\nLatest full run: [%s](%s) (machine and command there).\n\n", beginMark, filepath.Base(rel), rel)
	var ids []string
	for id := range tables {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, sc := range scenarios {
			if sc.id == id {
				fmt.Fprintf(&out, "### %s. %s\n\n%s\n![%s](%s-%s.svg)\n\n", id, sc.title, tables[id], id, base, id)
			}
		}
	}
	s = s[:i] + strings.TrimRight(out.String(), "\n") + "\n" + s[j:]
	return os.WriteFile(readme, []byte(s), 0o644)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchreport:", err)
	os.Exit(1)
}
