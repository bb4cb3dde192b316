// Command closebench measures a mass close (issue 35): N connections on
// one gust.Server, which then calls Shutdown, so that every connection
// closes at once. The server reports how long Shutdown took, how many
// times serving a connection held a netpoll event loop past 100 ms (the
// Metrics "blocked" event, with the longest hold its Warn records gave)
// and the CPU time it used meanwhile.
//
// The configurations alternate within a run: goroutine or netpoll mode,
// plain TCP or TLS (as a notifications service terminates it), and a
// plain handler against hub.Wrap with what a chat or notifications
// service does with it: each connection subscribed to one of -topics
// topics, joined to it in a hub.LocalPresence in OnOpen and leaving in
// OnClose, and told of its topic's joins and leaves, queued to it as
// messages: by one watcher per topic, nothing told once Shutdown began
// (-watch room, examples/chat's way), or by a watcher of its own (-watch
// each, the chat's earlier way).
//
// One binary, four modes: run (the orchestrator, which starts the others
// and prints a JSON line per measurement), server, clients (processes
// holding the connections, in netpoll mode, each from its own 127.0.0.x
// address) and report (the markdown table of run's JSON lines).
// scripts/bench-close runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	mode := flag.String("mode", "run", "run, server, clients or report")
	// server
	addr := flag.String("addr", "127.0.0.1:19701", "server: WebSocket listen address")
	control := flag.String("control", "127.0.0.1:19700", "server: control listen address (plain HTTP: /stats, /stop)")
	netpoll := flag.Bool("netpoll", false, "server: netpoll mode")
	useTLS := flag.Bool("tls", false, "server: TLS (a self-signed certificate made at start); clients: wss://")
	useHub := flag.Bool("hub", false, "server: hub.Wrap, a topic and a LocalPresence per connection")
	topics := flag.Int("topics", 100, "server: topics the connections are spread over (with -hub)")
	watch := flag.String("watch", "room", "server: presence watchers (with -hub): room (one per topic, telling the topic's connections, as examples/chat), each (every connection watches its topic), topic (one per topic, publishing to it through the Hub) or none")
	traceFile := flag.String("trace", "", "server: write a runtime trace of the Shutdown to this file (a CPU profile if it ends in .pprof); run: a file per measurement in this directory")
	profile := flag.String("profile", "trace", "run, with -trace: trace (runtime traces) or cpu (CPU profiles)")
	// clients
	url := flag.String("url", "", "clients: the ws:// or wss:// URL to dial")
	source := flag.String("source", "", "clients: the local IP address to dial from")
	conns := flag.Int("conns", 2000, "run: connections in all; clients: connections of this process")
	hold := flag.Duration("hold", 10*time.Minute, "clients: exit after this long whatever happens")
	// run
	perClient := flag.Int("per-client", 10000, "run: connections per clients process (one descriptor each)")
	modes := flag.String("modes", "goroutine,netpoll", "run: serving modes, comma-separated")
	apps := flag.String("apps", "plain,hub", "run: handlers, comma-separated: plain, hub")
	transports := flag.String("transports", "tcp,tls", "run: transports, comma-separated: tcp, tls")
	runs := flag.Int("runs", 1, "run: rounds of the configurations")
	basePort := flag.Int("port", 19700, "run: first port (two per measurement)")
	// report
	cmdLine := flag.String("cmd", "", "report: the command that made the results, for the heading")
	flag.Parse()

	var err error
	switch *mode {
	case "server":
		err = runServer(serverConfig{
			addr: *addr, control: *control, netpoll: *netpoll, tls: *useTLS,
			hub: *useHub, topics: *topics, watch: *watch, trace: *traceFile,
		})
	case "clients":
		err = runClients(*url, *source, *conns, *hold)
	case "run":
		err = orchestrate(runConfig{
			conns: *conns, perClient: *perClient, runs: *runs, basePort: *basePort,
			modes: split(*modes), apps: split(*apps), transports: split(*transports),
			topics: *topics, watch: *watch, traceDir: *traceFile, profile: *profile,
		})
	case "report":
		err = report(os.Stdin, os.Stdout, *cmdLine)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "closebench:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
