package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// target is the bar: gust at least this many times faster than the faster peer.
const target = 1.5

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// stat is the median of one field over the samples of one client in one cell.
func stat(all []sample, client, payload string, n int, dir string, field func(sample) float64) float64 {
	var v []float64
	for _, s := range all {
		if s.Client == client && s.Payload == payload && s.N == n && s.Dir == dir {
			v = append(v, field(s))
		}
	}
	return median(v)
}

func msOf(s sample) float64 { return s.Ms }

func isGust(c string) bool { return strings.HasPrefix(c, "gust") }

// ratio is the faster peer's median time over gust's (gust being client g), or NaN without
// peers.
func ratio(all []sample, clients []string, g, payload string, n int, dir string) float64 {
	best := math.Inf(1)
	for _, c := range clients {
		if !isGust(c) {
			best = math.Min(best, stat(all, c, payload, n, dir, msOf))
		}
	}
	if math.IsInf(best, 1) {
		return math.NaN()
	}
	return best / stat(all, g, payload, n, dir, msOf)
}

// ratioColumns are the gust clients that get a ratio column: all of them, when there are peers.
func ratioColumns(clients []string) []string {
	var gs []string
	peers := false
	for _, c := range clients {
		if isGust(c) {
			gs = append(gs, c)
		} else {
			peers = true
		}
	}
	if !peers {
		return nil
	}
	return gs
}

var dirs = []string{"out", "in", "in-first"}

func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return commas(int(math.Round(v)))
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) {
		return "–"
	}
	if r < target {
		return fmt.Sprintf("%.2f× ✗", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func dirTitle(d string) string {
	switch d {
	case "out":
		return "Out"
	case "in":
		return "In"
	}
	return "In, from the 1st"
}

func cellSummary(all []sample, payload string, n int, clients []string) string {
	var parts []string
	for _, dir := range dirs {
		var b strings.Builder
		b.WriteString(dirTitle(dir))
		for _, c := range clients {
			fmt.Fprintf(&b, " %s %s", c, fmtMs(stat(all, c, payload, n, dir, msOf)))
		}
		for _, g := range ratioColumns(clients) {
			fmt.Fprintf(&b, " (%s %.2f×)", g, ratio(all, clients, g, payload, n, dir))
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, " | ") + " ms"
}

type reportInfo struct {
	command string
	reps    int
	warmup  int
}

// markdown renders a table per payload, a summary of the cells that miss the target, and the
// per-message system calls and allocations at the largest N.
func markdown(all []sample, cfg benchConfig, info reportInfo) string {
	var b strings.Builder
	if info.command != "" {
		fmt.Fprintf(&b, "Command: `%s`  \n", info.command)
	}
	fmt.Fprintf(&b, "Median of %d runs per cell, each on a fresh connection after a warm-up of up to %d messages each way; "+
		"times in ms. Out: from the first write until the server's answer that it has read all N. "+
		"In: from the request until the N-th message is delivered; \"In, from the 1st\": from the first message's delivery "+
		"to the N-th's (the study's own measure). × is the faster peer's median divided by gust's (✗: below %.1f×).\n",
		info.reps, info.warmup, target)
	rcols := ratioColumns(cfg.clients)
	total, misses := 0, []string{}
	for _, p := range cfg.payloads {
		fmt.Fprintf(&b, "\n#### %s\n\n", p.title)
		b.WriteString("| N | |")
		for _, c := range cfg.clients {
			fmt.Fprintf(&b, " %s ms |", c)
		}
		for _, g := range rcols {
			fmt.Fprintf(&b, " %s × faster peer |", g)
		}
		b.WriteString("\n|---:|---|")
		for range len(cfg.clients) + len(rcols) {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, n := range cfg.counts {
			for _, dir := range dirs {
				fmt.Fprintf(&b, "| %s | %s |", commas(n), dirTitle(dir))
				for _, c := range cfg.clients {
					fmt.Fprintf(&b, " %s |", fmtMs(stat(all, c, p.name, n, dir, msOf)))
				}
				for _, g := range rcols {
					r := ratio(all, cfg.clients, g, p.name, n, dir)
					fmt.Fprintf(&b, " %s |", fmtRatio(r))
					if g == "gust" && dir != "in-first" {
						total++
						if r < target {
							misses = append(misses, fmt.Sprintf("%s %s N=%s (%.2f×)", p.name, dirTitle(dir), commas(n), r))
						}
					}
				}
				b.WriteString("\n")
			}
		}
	}
	if total > 0 {
		fmt.Fprintf(&b, "\ngust (WriteMessage) ≥ %.1f× the faster peer in %d of %d Out and In cells.", target, total-len(misses), total)
		if len(misses) > 0 {
			fmt.Fprintf(&b, " Below: %s.", strings.Join(misses, "; "))
		}
		b.WriteString("\n")
	}

	nMax := slices.Max(cfg.counts)
	fmt.Fprintf(&b, "\n#### Per message at N = %s: write and read system calls, heap allocations (client process, medians)\n\n", commas(nMax))
	b.WriteString("| payload | |")
	for _, c := range cfg.clients {
		fmt.Fprintf(&b, " %s writes / reads / allocs |", c)
	}
	b.WriteString("\n|---|---|")
	for range cfg.clients {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, p := range cfg.payloads {
		for _, dir := range []string{"out", "in"} {
			fmt.Fprintf(&b, "| %s | %s |", p.name, dirTitle(dir))
			for _, c := range cfg.clients {
				w := stat(all, c, p.name, nMax, dir, func(s sample) float64 { return s.WritesPerMsg })
				r := stat(all, c, p.name, nMax, dir, func(s sample) float64 { return s.ReadsPerMsg })
				a := stat(all, c, p.name, nMax, dir, func(s sample) float64 { return s.AllocsPerMsg })
				fmt.Fprintf(&b, " %s / %s / %s |", fmtPer(w), fmtPer(r), fmtPer(a))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func fmtPer(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v < 0.005:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

const (
	readmeBegin = "<!-- clientbench:begin -->"
	readmeEnd   = "<!-- clientbench:end -->"
)

// updateReadme replaces the text between the clientbench markers of file with body.
func updateReadme(file, body string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(b)
	i := strings.Index(s, readmeBegin)
	j := strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s section", file, readmeBegin, readmeEnd)
	}
	s = s[:i+len(readmeBegin)] + "\n" + strings.TrimSpace(body) + "\n" + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}
