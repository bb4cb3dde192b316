// Command drainbench measures the reconnect storm of a rolling restart
// (issue 36): N clients on one gust instance behind HAProxy, a second
// instance as the other backend, and the first stopped with Shutdown (1001
// to every connection at once) or with Drain (1012 to each at a random time
// over a window). The clients reconnect with the backoff of
// examples/chat's page (250 ms doubled up to 5 s, each wait drawn in
// [1/2, 1] of it, reset once open); the second instance counts the
// handshakes it answers in 100 ms buckets, and the peak bucket is the
// storm it took.
//
// One binary, four modes: run (the orchestrator, which starts the others
// and HAProxy, and prints a JSON line per run), server (a gust.Server
// with a health route and control routes), clients (connections that
// reconnect). scripts/bench-drain runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	mode := flag.String("mode", "run", "run, server or clients")
	// server
	addr := flag.String("addr", "127.0.0.1:19601", "server: listen address")
	netpoll := flag.Bool("netpoll", false, "server: netpoll mode")
	// clients
	url := flag.String("url", "", "clients: the ws:// URL to dial")
	conns := flag.Int("conns", 1000, "run: connections in all; clients: connections of this process")
	hold := flag.Duration("hold", 5*time.Minute, "clients: exit after this long whatever happens")
	// run
	perProxy := flag.Int("per-proxy", 5000, "run: connections per HAProxy process and per client process (each takes two descriptors per connection)")
	window := flag.Duration("window", 10*time.Second, "run: the drain's window")
	stops := flag.String("stops", "shutdown,drain", "run: the stops to measure, in order, comma-separated")
	runs := flag.Int("runs", 1, "run: rounds of the stops")
	basePort := flag.Int("port", 19600, "run: first port (servers at port+1, port+2; proxies from port+10)")
	haproxy := flag.String("haproxy", "haproxy", "run: the HAProxy binary")
	flag.Parse()

	var err error
	switch *mode {
	case "server":
		err = runServer(*addr, *netpoll)
	case "clients":
		err = runClients(*url, *conns, *hold)
	case "run":
		err = orchestrate(runConfig{
			conns: *conns, perProxy: *perProxy, window: *window, stops: *stops, runs: *runs,
			basePort: *basePort, haproxy: *haproxy, netpoll: *netpoll,
		})
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drainbench:", err)
		os.Exit(1)
	}
}
