package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report reads run's JSON lines from r and writes a markdown table of
// them to w: per configuration, the medians of the rounds.
func report(r io.Reader, w io.Writer, cmdLine string) error {
	var results []result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var res result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return fmt.Errorf("report: %v: %s", err, line)
		}
		results = append(results, res)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("report: no results")
	}

	type group struct {
		m    measurement
		runs []result
	}
	var groups []*group
	find := func(m measurement) *group {
		for _, g := range groups {
			if g.m == m {
				return g
			}
		}
		g := &group{m: m}
		groups = append(groups, g)
		return g
	}
	for _, res := range results {
		g := find(res.measurement)
		g.runs = append(g.runs, res)
	}
	medianOf := func(g *group, f func(result) float64) float64 {
		var v []float64
		for _, res := range g.runs {
			if res.Error == "" {
				v = append(v, f(res))
			}
		}
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	shutdown := func(res result) float64 { return res.Server.ShutdownMS }

	first := results[0]
	fmt.Fprintf(w, "# Mass close: Shutdown of %d connections with and without hub.Wrap\n\n", first.Conns)
	if cmdLine != "" {
		fmt.Fprintf(w, "Command: `%s`.\n\n", cmdLine)
	}
	fmt.Fprintf(w, "%s, %s. One gust.Server process; the connections are held by clients processes (gust, netpoll mode)\n", time.Now().Format("2006-01-02"), machine())
	fmt.Fprintf(w, "on loopback; once all are open the server calls Shutdown (1001 to every connection at once) and waits\n")
	fmt.Fprintf(w, "for every OnClose. hub: hub.Wrap, each connection subscribed to one of %d topics, joined to it in a\n", max(first.Topics, results[len(results)-1].Topics))
	fmt.Fprintf(w, "hub.LocalPresence in OnOpen and leaving in OnClose (watchers: %s; room: one per topic telling its\n", watchOf(results))
	fmt.Fprintf(w, "connections of each change, as examples/chat; each: every connection watching its topic).\n")
	fmt.Fprintf(w, "Blocked: Metrics \"blocked\" events (serving a connection held a netpoll event loop past 100 ms while a\n")
	fmt.Fprintf(w, "callback ran); held: \"held\" events (the same with no callback running: gust's work or no CPU free),\n")
	fmt.Fprintf(w, "summed over the rounds; longest: the longest hold in their Warn records (one a second at most). Medians of the\n")
	fmt.Fprintf(w, "rounds, which alternate the configurations; the ratio is hub's Shutdown over plain's, same mode and transport.\n\n")
	fmt.Fprintf(w, "| transport | mode | handler | rounds | Shutdown | (min–max) | hub / plain | server CPU | blocked | held | longest held | clients saw 1001 |\n")
	fmt.Fprintf(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range groups {
		ok := 0
		lo, hi := 0.0, 0.0
		var blocked, heldN int64
		held := 0.0
		var saw, conns int64
		var errs []string
		for _, res := range g.runs {
			if res.Error != "" {
				errs = append(errs, res.Error)
				continue
			}
			if ok == 0 || res.Server.ShutdownMS < lo {
				lo = res.Server.ShutdownMS
			}
			hi = max(hi, res.Server.ShutdownMS)
			ok++
			blocked += res.Server.Blocked
			heldN += res.Server.Held
			held = max(held, res.Server.HeldMaxMS)
			saw += res.Clients.GoingAway
			conns += res.Server.Conns
		}
		ratio := "—"
		if g.m.App == "hub" {
			plain := measurement{g.m.Mode, "plain", g.m.Transport}
			for _, p := range groups {
				if p.m == plain {
					if d := medianOf(p, shutdown); d > 0 {
						ratio = fmt.Sprintf("%.2f×", medianOf(g, shutdown)/d)
					}
				}
			}
		}
		heldCell := "—"
		if held > 0 {
			heldCell = fmt.Sprintf("%.0f ms", held)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.0f ms | %.0f–%.0f | %s | %.0f ms | %d | %d | %s | %d of %d |\n",
			g.m.Transport, g.m.Mode, g.m.App, ok, medianOf(g, shutdown), lo, hi, ratio,
			medianOf(g, func(res result) float64 { return res.Server.CPUMS }), blocked, heldN, heldCell, saw, conns)
		for _, e := range errs {
			fmt.Fprintf(w, "| | | | error: %s | | | | | | | | |\n", strings.ReplaceAll(e, "|", "/"))
		}
	}
	for _, res := range results {
		if res.Server.Message != "" {
			fmt.Fprintf(w, "\nThe first record said: %q\n", res.Server.Message)
			break
		}
	}
	return nil
}

func watchOf(results []result) string {
	for _, res := range results {
		if res.Watch != "" {
			return res.Watch
		}
	}
	return "—"
}

// machine describes the host: cores, CPU model, kernel, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d cores (%s)%s, %s", runtime.NumCPU(), model, kernel, runtime.Version())
}
