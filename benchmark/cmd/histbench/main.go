// Command histbench measures examples/chat's history (issue 34): how much
// members recovering it hold up a room's live messages (-scenario lag),
// what it holds after many rooms (memory), and how long a crowd that
// reconnects at once waits for what it missed (recovery). The chat is a
// binary built from the tree to measure (go build in examples/chat), which
// histbench starts on 127.0.0.1 for the run and stops after, so that the
// same client measures builds from before and after a change; it speaks
// the chat's protocol with a WebSocket client of its own, and takes
// since=SEQ (the build before epochs) and since=EPOCH:SEQ alike.
//
//	histbench -chat ./chat -label now -scenario lag -netpoll
//	histbench -chat ./chat -label now -scenario memory -rooms 20 -room-msgs 20
//	histbench -chat ./chat -label now -scenario recovery -clients 100 -json out.jsonl
//	histbench -report out.jsonl        # the markdown tables of the runs, with medians
//
// Each run prints its table row and, with -json, appends a JSON line to the
// file. scripts/bench-history builds the trees and alternates the runs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	chat := flag.String("chat", "", "the chat binary to run (go build in examples/chat of the tree to measure)")
	label := flag.String("label", "", "the build's name in the report (default: the binary's file name)")
	scenario := flag.String("scenario", "lag", "lag, memory or recovery")
	netpoll := flag.Bool("netpoll", false, "run the chat with -netpoll")
	history := flag.Int("history", 0, "the chat's -history (messages kept per room; 0: its default, 1,000)")
	run := flag.Int("run", 0, "the run's number, for the report")
	jsonPath := flag.String("json", "", "append the result as a JSON line to this file")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up (and stop the chat) after this long")
	text := flag.Int("text", 2000, "bytes of text in each message of the history (the chat keeps at most 2,000)")

	members := flag.Int("members", 1000, "lag: members who join from since=0 and never read")
	readers := flag.Int("readers", 10, "lag: members who read, timing the live messages")
	fill := flag.Int("fill", 1000, "lag, recovery: messages put in the room's history first")
	interval := flag.Duration("interval", 100*time.Millisecond, "lag: one live message per interval")
	span := flag.Duration("T", 10*time.Second, "lag: how long live messages are sent while the silent members join")
	drain := flag.Duration("drain", 30*time.Second, "lag: how long to wait after -T for the live messages still on their way")
	rcvbuf := flag.Int("rcvbuf", 4096, "lag: SO_RCVBUF of the silent members' sockets")
	dialPar := flag.Int("dial-par", 100, "lag: silent members dialing at a time")
	byMessage := flag.Bool("by-message", false, "lag: print each live message's send time and worst lag to stderr")

	rooms := flag.Int("rooms", 600, "memory: rooms written to")
	roomMsgs := flag.Int("room-msgs", 200, "memory: messages said in each room")
	par := flag.Int("par", 8, "memory: rooms written to at a time")
	inflight := flag.Int("window", 32, "memory, and filling a history: messages said and not yet back, at most")

	clients := flag.Int("clients", 1000, "recovery: members reconnecting at once")
	missed := flag.Int("missed", 50, "recovery: the last messages each of them missed")
	wait := flag.Duration("wait", time.Minute, "recovery: how long a client waits for its recovered frame")

	report := flag.Bool("report", false, "print the markdown tables of the JSON lines in the files named as arguments, and exit")
	flag.Parse()

	if *report {
		recs, err := readRecords(flag.Args())
		if err != nil {
			fatalf("%v", err)
		}
		writeReport(os.Stdout, recs, true)
		return
	}
	if *chat == "" {
		fatalf("-chat is required")
	}
	if *label == "" {
		*label = filepath.Base(*chat)
	}
	if *readers < 1 || *fill < 1 || *clients < 1 || *rooms < 1 || *roomMsgs < 1 || *par < 1 || *inflight < 1 || *dialPar < 1 ||
		*members < 0 || *interval <= 0 || *span < *interval || *text < 1 {
		fatalf("-readers, -fill, -clients, -rooms, -room-msgs, -par, -window, -dial-par and -text must be at least 1, -members at least 0, -interval above 0 and -T at least -interval")
	}
	if err := raiseNoFile(20000); err != nil {
		fatalf("raising RLIMIT_NOFILE: %v", err)
	}

	rec := record{Scenario: *scenario, Label: *label, Mode: "goroutine", Run: *run, Time: time.Now().Format(time.RFC3339), Chat: *chat}
	if *netpoll {
		rec.Mode = "netpoll"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	err := func() error {
		switch *scenario {
		case "lag", "memory", "recovery":
		default:
			return fmt.Errorf("-scenario %q: lag, memory or recovery", *scenario)
		}
		ch, err := startChat(*chat, *netpoll, *history, *scenario == "memory")
		if err != nil {
			return err
		}
		defer ch.stop()
		switch *scenario {
		case "lag":
			rec.Lag, err = runLag(ctx, ch, lagConfig{
				members: *members, readers: *readers, fill: *fill, text: *text,
				interval: *interval, span: *span, drain: *drain, rcvbuf: *rcvbuf, dialPar: *dialPar, window: *inflight,
				byMessage: *byMessage,
			})
		case "memory":
			rec.Memory, err = runMemory(ctx, ch, memoryConfig{rooms: *rooms, perRoom: *roomMsgs, text: *text, par: *par, window: *inflight})
		case "recovery":
			rec.Recovery, err = runRecovery(ctx, ch, recoveryConfig{clients: *clients, fill: *fill, missed: *missed, text: *text, wait: *wait, window: *inflight})
		}
		if aerr := ch.alive(); aerr != nil || err == nil {
			return errors.Join(err, aerr)
		}
		return fmt.Errorf("%w (the chat's last lines: %s)", err, ch.lastLines())
	}()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("-timeout %v passed: %w", *timeout, err)
	}
	if err != nil {
		rec.Error = err.Error()
		rec.Lag, rec.Memory, rec.Recovery = nil, nil, nil
	}
	writeReport(os.Stdout, []record{rec}, false)
	if *jsonPath != "" {
		if werr := appendJSON(*jsonPath, rec); werr != nil {
			fatalf("%v", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "histbench:", err)
		os.Exit(1)
	}
}

func appendJSON(path string, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Close())
}

// raiseNoFile sets the soft limit on open descriptors to limit, or the
// hard limit if lower: the lag scenario holds a thousand and more, and the
// chat, which inherits it, as many.
func raiseNoFile(limit uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	l.Cur = min(l.Max, limit)
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "histbench: "+format+"\n", args...)
	os.Exit(1)
}
