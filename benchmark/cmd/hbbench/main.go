// Command hbbench measures what gust's heartbeats (Options.PingInterval)
// cost a server holding many idle connections (issue 14, item 2): its CPU
// per second, and its heap, RSS and goroutines per connection, with
// heartbeats on or off. One binary, two modes, one process each:
//
//	hbbench -mode server -addr 127.0.0.1:9500 -conns 19000 -ping 1s -T 10
//	hbbench -mode client -addr 127.0.0.1:9500 -conns 19000
//
// The server (a gust.Server whose handler only counts opens and closes)
// measures its heap and RSS with no connection, waits until -conns are open,
// lets them settle, measures its CPU over -T seconds and its heap, RSS and
// goroutines after, prints one JSON line and exits, closing every
// connection. The client opens -conns gust connections whose handler
// answers pings (BuiltinEventHandler) and holds them until the server
// closes them or -hold passes. scripts/bench-heartbeat runs both, with
// heartbeats off and on, and writes the table.
//
// A process may hold at most `ulimit -Hn` descriptors (each raises its soft
// limit to that): the server holds all the connections, so -conns must stay
// a little below it.
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "", `"server" or "client"`)
	addr := flag.String("addr", "127.0.0.1:9500", "the server's address (loopback)")
	conns := flag.Int("conns", 19000, "connections: those the server waits for, or those the client opens")
	ping := flag.Duration("ping", 0, "server: Options.PingInterval (0: heartbeats off)")
	pingTimeout := flag.Duration("ping-timeout", 0, "server: Options.PingTimeout (0: PingInterval)")
	settle := flag.Duration("settle", 3*time.Second, "server: the pause between the last open and the measured window")
	window := flag.Float64("T", 10, "server: measured seconds")
	wait := flag.Duration("wait", 3*time.Minute, "server: how long to wait for -conns connections before giving up")
	rate := flag.Int("rate", 2000, "client: dials per second at most")
	concurrency := flag.Int("dial-concurrency", 32, "client: dials in flight at most")
	hold := flag.Duration("hold", 5*time.Minute, "client: how long to hold the connections if the server does not close them")
	timeout := flag.Duration("timeout", 3*time.Minute, "client: how long dialing all the connections may take")
	flag.Parse()

	limit, err := raiseNoFile()
	if err != nil {
		fatalf("raising RLIMIT_NOFILE: %v", err)
	}
	if *conns < 1 || uint64(*conns)+100 > limit {
		fatalf("-conns %d: must be between 1 and the descriptor limit (%d) minus 100", *conns, limit)
	}
	switch *mode {
	case "server":
		err = serve(serverConfig{
			addr: *addr, conns: *conns, ping: *ping, pingTimeout: *pingTimeout,
			settle: *settle, window: time.Duration(*window * float64(time.Second)), wait: *wait,
		})
	case "client":
		err = runClients(clientConfig{
			addr: *addr, conns: *conns, rate: *rate, concurrency: *concurrency,
			hold: *hold, timeout: *timeout,
		})
	default:
		fatalf(`-mode must be "server" or "client"`)
	}
	if err != nil {
		fatalf("%v", err)
	}
}

// raiseNoFile raises the soft limit on open descriptors to the hard limit,
// and returns it.
func raiseNoFile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "hbbench: "+format+"\n", args...)
	os.Exit(1)
}
