package servers

import (
	"context"
	"net"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/metrics"
)

// gust: a gust.Server, gust's own accept loop and handshake parser, ReadLoop in the goroutine
// that accepted the connection; OnMessage writes back, and the write is corked with the others
// of the same read. Compression off, as for the peers; gust-deflate turns it on.

func init() {
	register("gust", "github.com/gustws/gust: Server, ReadLoop per connection, corked writes", func(addr string) (Server, error) {
		return startGust(addr, gust.CompressionOptions{})
	})
	// gust-deflate: the same with permessage-deflate on and every other compression option at
	// its default: context takeover both ways, level 1, 512-byte threshold, 32 KiB windows,
	// the compressor given back after 1 s idle.
	register("gust-deflate", "github.com/gustws/gust: as gust, with Compression{Enabled: true} (defaults: context takeover, level 1)", func(addr string) (Server, error) {
		return startGust(addr, gust.CompressionOptions{Enabled: true})
	})
	// gust-metrics: gust with the built-in metrics.Counters set as Options.Metrics, so that
	// scripts/bench -servers "gust gust-metrics" measures the hook's cost in one run.
	register("gust-metrics", "github.com/gustws/gust: as gust, with Options.Metrics set to a metrics.Counters", func(addr string) (Server, error) {
		return startGustWith(addr, gust.Options{Metrics: new(metrics.Counters)})
	})
	// gust-netpoll: gust in netpoll mode (Options.Netpoll): an idle connection holds no
	// goroutine and no buffer; gust's event loops read, parse and dispatch.
	register("gust-netpoll", "github.com/gustws/gust: as gust, in netpoll mode (Options.Netpoll)", func(addr string) (Server, error) {
		return startGustWith(addr, gust.Options{Netpoll: true})
	})
	// gust-netpoll-deflate: gust-netpoll with permessage-deflate on (as gust-deflate).
	register("gust-netpoll-deflate", "github.com/gustws/gust: as gust-netpoll, with Compression{Enabled: true}", func(addr string) (Server, error) {
		return startGustWith(addr, gust.Options{Netpoll: true, Compression: gust.CompressionOptions{Enabled: true}})
	})
}

type gustEcho struct{ gust.BuiltinEventHandler }

func (gustEcho) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data) // a failed write ends the connection and reaches OnClose
	m.Close()
}

func startGust(addr string, compression gust.CompressionOptions) (Server, error) {
	return startGustWith(addr, gust.Options{Compression: compression})
}

// startGustWith starts the gust echo server with opts, MaxMessageSize set.
func startGustWith(addr string, opts gust.Options) (Server, error) {
	return startGustOn(net.ListenConfig{}, addr, opts) // as net.Listen does
}

// startGustOn is startGustWith with a listener made by lc.
func startGustOn(lc net.ListenConfig, addr string, opts gust.Options) (Server, error) {
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	opts.MaxMessageSize = MaxMessage
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: gustEcho{},
		Options: opts,
	}}
	go srv.Serve(ln)
	return gustServer{srv: srv, addr: ln.Addr().String()}, nil
}

type gustServer struct {
	srv  *gust.Server
	addr string
}

func (s gustServer) Addr() string { return s.addr }

func (s gustServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	return nil
}
