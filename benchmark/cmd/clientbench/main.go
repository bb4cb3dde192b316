// Command clientbench is the client benchmark of issue 6, after the React Native WebSocket
// study (seeds/000): gust's client side by side with gorilla/websocket's and coder/websocket's,
// sending ("Out") and receiving ("In") 100, 1,000 and 10,000 messages of a small JSON (text
// and binary), a large JSON (text and binary) and a 234 KiB binary, against one local server.
//
//	clientbench server -addr 127.0.0.1:19301
//	clientbench run -addr 127.0.0.1:19301 -testdata benchmark/testdata -md out.md
//
// The server is raw RFC 6455 written here (see server.go), the same for every client.
//
// Out: the time from just before the client writes the first of N messages until it has the
// server's answer "done N", which the server sends once it has read (and checked) all N: every
// message has left the client, crossed loopback and been parsed by the server, and one small
// message came back.
//
// In: the time from just before the client writes the request "in N" until the library has
// delivered the N-th of the server's N messages to the application (gust: OnMessage; gorilla:
// ReadMessage returning; coder: Read returning). The server writes the N frames back to back,
// 64 KiB per write.
//
// Each cell is run -reps times, each time on a fresh connection after a short warm-up, the
// clients taking turns in a rotating order; the report gives the median.
//
// scripts/bench-client runs the server and the client on different cores and writes the report.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "server":
		serverMain(os.Args[2:])
	case "run":
		runMain(os.Args[2:])
	case "readme":
		readmeMain(os.Args[2:])
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: clientbench server [-addr HOST:PORT]\n       clientbench run [flags]  (clientbench run -h for the flags)\n       clientbench readme -file README.md -report REPORT.md")
	os.Exit(2)
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clientbench: "+format+"\n", args...)
	os.Exit(1)
}

func serverMain(args []string) {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:19301", "listen address (loopback)")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fatal("%v", err)
	}
	fmt.Printf("clientbench server pid=%d addr=%s\n", os.Getpid(), ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		ln.Close()
	}()
	if err := serve(ln, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		fatal("%v", err)
	}
}

func runMain(args []string) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:19301", "the server's address (clientbench server)")
	clients := fs.String("clients", strings.Join(defaultClients, ","), "clients, comma-separated, of "+strings.Join(clientNames, ", "))
	payloads := fs.String("payloads", strings.Join(payloadNames, ","), "payloads, comma-separated")
	counts := fs.String("n", "100,1000,10000", "message counts, comma-separated")
	reps := fs.Int("reps", 7, "timed runs per client and cell (the median is reported)")
	warmup := fs.Int("warmup", 100, "messages each way on a fresh connection before the timed runs (at most N)")
	testdata := fs.String("testdata", "testdata", "directory of client-small.json and client-large.json")
	opTimeout := fs.Duration("op-timeout", 60*time.Second, "a timed run longer than this fails the benchmark")
	jsonl := fs.String("jsonl", "", "append every sample to this file as a JSON line")
	md := fs.String("md", "", "write the report to this file (default: stdout)")
	command := fs.String("command", "", "the command line the report names")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the client process to this file")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	fs.Parse(args)

	cfg := benchConfig{
		url:       "ws://" + *addr + "/",
		clients:   split(*clients),
		reps:      *reps,
		warmup:    *warmup,
		opTimeout: *opTimeout,
	}
	for _, c := range cfg.clients {
		if !slices.Contains(clientNames, c) {
			fatal("unknown client %q (have %s)", c, strings.Join(clientNames, ", "))
		}
	}
	for _, s := range split(*counts) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fatal("bad -n value %q", s)
		}
		cfg.counts = append(cfg.counts, n)
	}
	if cfg.reps < 1 || len(cfg.clients) == 0 || len(cfg.counts) == 0 {
		fatal("nothing to run")
	}
	var err error
	if cfg.payloads, err = loadPayloads(*testdata, split(*payloads)); err != nil {
		fatal("%v", err)
	}
	if !*quiet {
		cfg.progress = func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	}
	if *jsonl != "" {
		f, err := os.OpenFile(*jsonl, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fatal("%v", err)
		}
		defer f.Close()
		enc := json.NewEncoder(f)
		cfg.onSample = func(s sample) { enc.Encode(s) }
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal("%v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	all, err := runBench(cfg)
	if err != nil {
		fatal("FAIL: %v", err)
	}
	report := markdown(all, cfg, reportInfo{command: *command, reps: cfg.reps, warmup: cfg.warmup})
	if *md == "" {
		fmt.Print(report)
	} else if err := os.WriteFile(*md, []byte(report), 0o644); err != nil {
		fatal("%v", err)
	}
}

// readmeMain puts a report between the clientbench markers of a file (benchmark/README.md).
func readmeMain(args []string) {
	fs := flag.NewFlagSet("readme", flag.ExitOnError)
	file := fs.String("file", "README.md", "the file with the markers")
	report := fs.String("report", "", "the report (markdown)")
	fs.Parse(args)
	b, err := os.ReadFile(*report)
	if err != nil {
		fatal("%v", err)
	}
	if err := updateReadme(*file, string(b)); err != nil {
		fatal("%v", err)
	}
}

func split(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}
