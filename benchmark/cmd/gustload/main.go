// Command gustload is a tcpkali-like WebSocket load generator. It speaks RFC 6455 itself (no
// WebSocket library), keeps a window of messages in flight on every connection, and checks
// every echo byte for byte and in order: a wrong, missing or late echo ends the run with an
// error and exit status 1, never with a number.
//
//	cd benchmark && go install ./cmd/gustload
//	gustload -c 200 -w 16 -p 2396 -T 20s --ws 127.0.0.1:9001/
//	gustload -c 1 -w 256 -p 300 -T 10s -pid $(pgrep -n echoserver) 127.0.0.1:9001
//	gustload -c 10000 -idle -T 5s -stats http://127.0.0.1:9101/debug/stats 127.0.0.1:9001
//	gustload -c 19000 -idle -ping-at-end -T 10m 127.0.0.1:9001   # kill -USR1 ends the hold
//
// See benchmark/README.md for every flag and the scenarios.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gustws/gust/benchmark/internal/load"
)

// duration accepts Go durations ("20s", "1m30s") and, like tcpkali, bare seconds ("20").
type duration struct{ d *time.Duration }

func (v duration) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v duration) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		*v.d = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gustload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg load.Config
	cfg.Duration = 10 * time.Second
	cfg.Timeout = 10 * time.Second
	cfg.ConnectTimeout = 10 * time.Second
	cfg.PingTimeout = 30 * time.Second
	fs.IntVar(&cfg.Conns, "c", 1, "connections")
	fs.IntVar(&cfg.Window, "w", 1, "messages in flight per connection")
	fs.Float64Var(&cfg.Rate, "r", 0, "messages per second per connection (0: as fast as the window allows)")
	fs.Var(duration{&cfg.Duration}, "T", "duration of the measured phase (\"20s\" or seconds)")
	fs.Int64Var(&cfg.Count, "n", 0, "stop each connection after this many messages (0: no limit); with -recv-only, end the run once every connection has received this many, and fail if one has not within -T")
	msgText := fs.String("m", "", "message text to send (fixed payload)")
	msgFile := fs.String("f", "", "file whose content is the message (fixed payload)")
	fs.IntVar(&cfg.Size, "p", 0, "random payload of this many bytes, with a sequence number in it (default 300 without -m/-f)")
	ws := fs.Bool("ws", true, "speak WebSocket (the only mode; kept for tcpkali familiarity)")
	fs.BoolVar(&cfg.Binary, "binary", false, "send binary messages (default text)")
	fs.BoolVar(&cfg.RecvOnly, "recv-only", false, "send nothing; count the messages the server sends")
	fs.BoolVar(&cfg.Seq, "seq", false, "with -recv-only: every message's payload starts with a decimal sequence number; fail unless each connection's numbers follow one another")
	fs.BoolVar(&cfg.Idle, "idle", false, "connect, hold the connections idle for -T, report the server's memory (with -n: after n echoes each)")
	fs.BoolVar(&cfg.PingAtEnd, "ping-at-end", false, "with -idle: end the hold with a ping on every connection, and fail unless every one is answered")
	fs.Var(duration{&cfg.PingTimeout}, "ping-timeout", "with -ping-at-end: bound on the wait for all the pongs")
	fs.BoolVar(&cfg.Deflate, "deflate", false, "offer permessage-deflate with context takeover; compress every message, inflate the echoes")
	fs.BoolVar(&cfg.DeflateNoContext, "deflate-no-context", false, "like -deflate, offering server_no_context_takeover and client_no_context_takeover")
	fs.BoolVar(&cfg.AllowMasked, "allow-masked", false, "accept masked frames from the server (raw-copy, raw-buf echo ours as they are)")
	fs.Var(duration{&cfg.Timeout}, "timeout", "how long an echo may take before the run fails")
	fs.Var(duration{&cfg.ConnectTimeout}, "connect-timeout", "bound on each dial and handshake")
	fs.BoolVar(&cfg.TLSX25519, "tls-x25519", false, "over wss://, offer only the X25519 key exchange (default: crypto/tls's, X25519MLKEM768 first)")
	fs.Var(duration{&cfg.KeepAlive}, "tcp-keepalive", "TCP keepalive period of the connections (0: Go's default, 15s; negative: off)")
	fs.IntVar(&cfg.DialConcurrency, "dial-concurrency", 64, "handshakes in progress at once while ramping up")
	fs.Float64Var(&cfg.ConnectRate, "connect-rate", 0, "new connections per second while ramping up (0: no limit)")
	fs.IntVar(&cfg.SourceAddrs, "src", 0, "loopback source addresses 127.0.0.2.. to spread connections over (0: one per 20k connections above 20k)")
	fs.IntVar(&cfg.ServerPID, "pid", 0, "server pid: report its CPU time and RSS from /proc")
	fs.StringVar(&cfg.StatsURL, "stats", "", "server stats URL (echoserver -debug): heap, goroutines, allocations")
	fs.StringVar(&cfg.Label, "label", "", "label copied into the result (the server's name)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed for payloads and masking keys (0: random)")
	jsonOut := fs.Bool("json", false, "print the result as one JSON object on stdout")
	quiet := fs.Bool("q", false, "no progress lines")
	cpuprofile := fs.String("cpuprofile", "", "write gustload's own CPU profile to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gustload [flags] host:port[/path] | ws://host:port/path | wss://host:port/path")
		fs.PrintDefaults()
	}

	// Flags may come before and after the target.
	var targets []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		targets = append(targets, fs.Arg(0))
		args = fs.Args()[1:]
	}
	usage := func(msg string) int {
		fmt.Fprintln(stderr, "gustload:", msg)
		return 2
	}
	if len(targets) != 1 {
		return usage("give exactly one target, host:port[/path], ws://host:port/path or wss://host:port/path")
	}
	cfg.Target = targets[0]
	if !*ws {
		return usage("only WebSocket is spoken (--ws); plain TCP load is out of scope")
	}
	switch {
	case *msgText != "" && *msgFile != "":
		return usage("-m and -f exclude each other")
	case (*msgText != "" || *msgFile != "") && cfg.Size > 0:
		return usage("-p excludes -m and -f")
	case *msgText != "":
		cfg.Message = []byte(*msgText)
	case *msgFile != "":
		b, err := os.ReadFile(*msgFile)
		if err != nil {
			return usage(err.Error())
		}
		cfg.Message = b
	}
	if !*quiet {
		cfg.Progress = stderr
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return usage(err.Error())
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return usage(err.Error())
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.Idle {
		// SIGUSR1 ends the hold early: a driver running several gustloads ends them together.
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
		end := make(chan struct{})
		go func() {
			select {
			case <-usr1:
				close(end)
			case <-ctx.Done():
			}
		}()
		cfg.EndHold = end
	}
	res, err := load.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "gustload: FAIL:", err)
		if *jsonOut {
			b, _ := json.Marshal(map[string]string{"label": cfg.Label, "error": err.Error()})
			fmt.Fprintln(stdout, string(b))
		}
		return 1
	}
	if *jsonOut {
		b, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(b))
		summary(stderr, res)
	} else {
		summary(stdout, res)
	}
	return 0
}

func summary(w io.Writer, r *load.Result) {
	kind := "text"
	if r.Binary {
		kind = "binary"
	}
	fmt.Fprintf(w, "Target %s, %d connections (ramp %.2fs)", r.Target, r.Conns, r.RampSeconds)
	if r.Mode == "echo" {
		fmt.Fprintf(w, ", window %d, %d-byte %s messages", r.Window, r.Payload, kind)
	}
	if r.Rate > 0 {
		fmt.Fprintf(w, ", %.0f msg/s per connection", r.Rate)
	}
	fmt.Fprintln(w)
	if r.Deflate != "" {
		fmt.Fprintf(w, "Extensions: %s", r.Deflate)
		if r.DeflateOutRatio > 0 || r.DeflateInRatio > 0 {
			fmt.Fprintf(w, "; on the wire %.1f%% of the payload sent, %.1f%% of the echoes", 100*r.DeflateOutRatio, 100*r.DeflateInRatio)
		}
		fmt.Fprintln(w)
	}
	switch r.Mode {
	case "idle":
		if r.Messages > 0 {
			fmt.Fprintf(w, "Echoed %d %d-byte %s messages, every one verified; then held", r.Messages, r.Payload, kind)
		} else {
			fmt.Fprint(w, "Held")
		}
		fmt.Fprintf(w, " %d idle connections for %.1fs\n", r.Conns, r.Seconds)
		if r.ServerHeapPeakKB > 0 {
			fmt.Fprintf(w, "Server peak during the echoes: heap in use %.0f KiB (%.2f KiB per connection), RSS %d KiB (%.2f KiB per connection)\n",
				r.ServerHeapPeakKB, r.PeakHeapPerConnKB, r.ServerRSSPeakKB, r.PeakRSSPerConnKB)
		}
		if r.ServerPID > 0 {
			fmt.Fprintf(w, "Server RSS %d -> %d KiB: %.2f KiB per connection\n", r.ServerRSSBeforeKB, r.ServerRSSAfterKB, r.RSSPerConnKB)
		}
		if r.ServerHeapAfterKB > 0 {
			fmt.Fprintf(w, "Server heap in use %.0f -> %.0f KiB: %.2f KiB per connection (%.2f after a second GC, %.2f of it live objects); goroutines %d -> %d (%.2f per connection)\n",
				r.ServerHeapBeforeKB, r.ServerHeapAfterKB, r.HeapPerConnKB, r.HeapSettledPerConnKB, r.HeapLivePerConnKB,
				r.ServerGoroutinesPre, r.ServerGoroutines, r.GoroutinesPerConn)
		}
		if r.PingsAnswered > 0 {
			fmt.Fprintf(w, "Pinged every connection: %d pongs in %.2fs", r.PingsAnswered, r.PingSeconds)
			if r.ServerRSSAfterPingKB > 0 {
				fmt.Fprintf(w, "; then server RSS %d KiB", r.ServerRSSAfterPingKB)
			}
			if r.ServerHeapAfterPingKB > 0 {
				fmt.Fprintf(w, ", heap in use %.0f KiB, %d goroutines", r.ServerHeapAfterPingKB, r.ServerGoroutinesAfterPing)
			}
			fmt.Fprintln(w)
		}
		return
	case "recv-only":
		fmt.Fprintf(w, "Received %d messages in %.2fs: %.0f msg/s, %.2f MB/s\n", r.Messages, r.Seconds, r.MsgPerSec, r.MBPerSec)
		if s := r.Seq; s != nil {
			fmt.Fprintf(w, "Sequence numbers consecutive on every connection: first %d..%d, last %d..%d; %d connections received none\n",
				s.FirstMin, s.FirstMax, s.LastMin, s.LastMax, s.Empty)
		}
		if r.ServerHeapPeakKB > 0 {
			fmt.Fprintf(w, "Server peak: heap in use %.0f KiB (%.2f KiB per connection), RSS %d KiB (%.2f KiB per connection)\n",
				r.ServerHeapPeakKB, r.PeakHeapPerConnKB, r.ServerRSSPeakKB, r.PeakRSSPerConnKB)
		}
	default:
		fmt.Fprintf(w, "Echoed %d messages in %.2fs (+%d in flight at the end), every one verified\n", r.Messages, r.Seconds, r.Drained)
		fmt.Fprintf(w, "Rate %.0f msg/s, %.2f MB/s (payload, one way)\n", r.MsgPerSec, r.MBPerSec)
		fmt.Fprintf(w, "Latency min %s avg %s p50 %s p90 %s p99 %s max %s\n", ms(r.LatMinMs), ms(r.LatAvgMs),
			ms(r.LatP50Ms), ms(r.LatP90Ms), ms(r.LatP99Ms), ms(r.LatMaxMs))
	}
	fmt.Fprintf(w, "Client CPU %.0f%%\n", r.ClientCPU)
	if r.ServerPID > 0 {
		fmt.Fprintf(w, "Server pid %d: CPU %.2fs (%.0f%%), %.2f s per million messages; RSS %d -> %d KiB\n", r.ServerPID,
			r.ServerCPUSeconds, r.ServerCPUPercent, r.ServerCPUPerMillion, r.ServerRSSBeforeKB, r.ServerRSSAfterKB)
	}
	if r.ServerAllocsPerMsg > 0 || r.ServerGoroutines > 0 {
		fmt.Fprintf(w, "Server %.2f allocations per message; heap in use %.0f KiB; %d goroutines\n", r.ServerAllocsPerMsg, r.ServerHeapAfterKB, r.ServerGoroutines)
	}
}

func ms(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + "s"
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
	default:
		return strings.TrimSuffix(strconv.FormatFloat(v*1000, 'f', 1, 64), ".0") + "µs"
	}
}
