package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// record is one run of one scenario: a JSON line in benchmark/results.
type record struct {
	Scenario string          `json:"scenario"`
	Label    string          `json:"label"` // the build
	Mode     string          `json:"mode"`  // goroutine or netpoll
	Run      int             `json:"run,omitempty"`
	Time     string          `json:"time"`
	Chat     string          `json:"chat"` // the binary run
	Lag      *lagResult      `json:"lag,omitempty"`
	Memory   *memoryResult   `json:"memory,omitempty"`
	Recovery *recoveryResult `json:"recovery,omitempty"`
	Error    string          `json:"error,omitempty"`
}

func readRecords(paths []string) ([]record, error) {
	var recs []record
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			var r record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", p, n, err)
			}
			recs = append(recs, r)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// writeReport writes the markdown tables of recs: every run of each
// scenario, and with full what the columns say and the median over the
// runs of each build and mode.
func writeReport(w io.Writer, recs []record, full bool) {
	for _, sc := range []string{"lag", "memory", "recovery"} {
		var rows []record
		for _, r := range recs {
			if r.Scenario == sc {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		t := tables[sc]
		fmt.Fprintf(w, "### %s\n\n", t.title)
		if full {
			fmt.Fprintf(w, "%s\n\n", t.about)
		}
		fmt.Fprintln(w, "| build | mode | run | "+strings.Join(t.cols, " | ")+" |")
		fmt.Fprintln(w, "|---|---|---:|"+strings.Repeat("---:|", len(t.cols)))
		for _, r := range rows {
			if r.Error != "" {
				fmt.Fprintf(w, "| %s | %s | %d | error: %s |\n", r.Label, r.Mode, r.Run, strings.ReplaceAll(r.Error, "|", "/"))
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s |\n", r.Label, r.Mode, r.Run, strings.Join(t.row(r), " | "))
		}
		fmt.Fprintln(w)
		if !full {
			continue
		}
		type key struct{ label, mode string }
		var order []key
		groups := map[key][]record{}
		for _, r := range rows {
			k := key{r.Label, r.Mode}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			if r.Error == "" {
				groups[k] = append(groups[k], r)
			}
		}
		fmt.Fprintf(w, "Median over the runs:\n\n| build | mode | runs | %s |\n", strings.Join(t.sumCols, " | "))
		fmt.Fprintln(w, "|---|---|---:|"+strings.Repeat("---:|", len(t.sumCols)))
		for _, k := range order {
			g := groups[k]
			cells := make([]string, len(t.sumCols))
			for i := range t.sumCols {
				var v []float64
				for _, r := range g {
					v = append(v, t.sum(r)[i])
				}
				cells[i] = "–"
				if len(v) > 0 {
					cells[i] = t.sumFmt[i](median(v))
				}
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s |\n", k.label, k.mode, len(g), strings.Join(cells, " | "))
		}
		fmt.Fprintln(w)
	}
}

type table struct {
	title, about string
	cols         []string
	row          func(record) []string
	sumCols      []string
	sum          func(record) []float64
	sumFmt       []func(float64) string
}

var tables = map[string]table{
	"lag": {
		title: "Live-message lag while members who never read recover the history",
		about: "A room whose history holds `fill` messages; `readers` members who read, joined from since=0; " +
			"a live message every `interval` for `T` while `members` more join from since=0 and never read. " +
			"Lag: a live message's arrival at a reader less its send; samples = live messages × readers. " +
			"Joined / left: the silent members the readers saw join, and leave (cut by the chat). " +
			"Missing: samples not there at the end of the drain, counted as late as that.",
		cols: []string{"silent members (dialed / joined / left)", "history", "samples", "p50 ms", "p99 ms", "max ms", "> 1 s", "missing", "chat peak RSS MiB"},
		row: func(r record) []string {
			l := r.Lag
			return []string{
				fmt.Sprintf("%d (%d / %d / %d)", l.Members, l.Dialed, l.Joined, l.Left),
				fmt.Sprintf("%d × %d B", l.Fill, l.TextBytes),
				fmt.Sprintf("%d × %d", l.Live, l.Readers),
				msCell(l.P50MS), msCell(l.P99MS), msCell(l.MaxMS),
				fmt.Sprintf("%.1f %%", 100*l.Over1s), fmt.Sprint(l.Missing), fmt.Sprintf("%.0f", l.ChatPeakRSSMiB),
			}
		},
		sumCols: []string{"p50 ms", "p99 ms", "max ms", "> 1 s"},
		sum: func(r record) []float64 {
			return []float64{r.Lag.P50MS, r.Lag.P99MS, r.Lag.MaxMS, 100 * r.Lag.Over1s}
		},
		sumFmt: []func(float64) string{msCell, msCell, msCell, func(v float64) string { return fmt.Sprintf("%.1f %%", v) }},
	},
	"memory": {
		title: "History memory after many rooms",
		about: "`rooms` rooms, each written by one member who says `per room` texts (`par` rooms at a time). " +
			"Heap: the chat's live heap marked by a GC (gctrace's ->C MB, whole MiB) that began after the load; " +
			"RSS: VmRSS then.",
		cols: []string{"rooms × messages", "heap before MiB", "heap after MiB", "heap growth MiB", "RSS before MiB", "RSS after MiB", "RSS growth MiB", "load s"},
		row: func(r record) []string {
			m := r.Memory
			return []string{
				fmt.Sprintf("%d × %d × %d B", m.Rooms, m.PerRoom, m.TextBytes),
				fmt.Sprint(m.HeapBeforeMiB), fmt.Sprint(m.HeapAfterMiB), fmt.Sprintf("**%+d**", m.HeapGrowthMiB),
				fmt.Sprintf("%.1f", m.RSSBeforeMiB), fmt.Sprintf("%.1f", m.RSSAfterMiB), fmt.Sprintf("%+.1f", m.RSSGrowthMiB),
				fmt.Sprintf("%.1f", m.LoadSeconds),
			}
		},
		sumCols: []string{"heap growth MiB", "RSS growth MiB"},
		sum: func(r record) []float64 {
			return []float64{float64(r.Memory.HeapGrowthMiB), r.Memory.RSSGrowthMiB}
		},
		sumFmt: []func(float64) string{signed, signed},
	},
	"recovery": {
		title: "Recovery time for a crowd reconnecting at once",
		about: "A room keeping `fill` messages; `clients` members who missed the last `missed` connect at once " +
			"with since = the position before those; each times the start of its dial to its recovered frame. " +
			"Messages: what each got before recovered (= missed when all is well).",
		cols: []string{"clients (ok)", "history", "since", "messages / client", "gaps", "p50 ms", "p99 ms", "max ms", "mean ms", "chat peak RSS MiB"},
		row: func(r record) []string {
			c := r.Recovery
			msgs := fmt.Sprint(c.MsgsMin)
			if c.MsgsMax != c.MsgsMin {
				msgs = fmt.Sprintf("%d–%d", c.MsgsMin, c.MsgsMax)
			}
			return []string{
				fmt.Sprintf("%d (%d)", c.Clients, c.OK),
				fmt.Sprintf("%d × %d B, missed %d", c.Fill, c.TextBytes, c.Missed),
				"`" + c.Since + "`", msgs, fmt.Sprint(c.Gaps),
				msCell(c.P50MS), msCell(c.P99MS), msCell(c.MaxMS), msCell(c.MeanMS), fmt.Sprintf("%.0f", c.ChatPeakRSSMiB),
			}
		},
		sumCols: []string{"p50 ms", "p99 ms", "max ms"},
		sum: func(r record) []float64 {
			return []float64{r.Recovery.P50MS, r.Recovery.P99MS, r.Recovery.MaxMS}
		},
		sumFmt: []func(float64) string{msCell, msCell, msCell},
	},
}

func msCell(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func signed(v float64) string { return fmt.Sprintf("%+.1f", v) }
