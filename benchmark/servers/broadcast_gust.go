package servers

import (
	"net"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// bcast-gust: a gust.Server with a hub.Hub (gust.OutboxCloseSlow, outboxes of 4,096 messages);
// every connection joins through Hub.Wrap and the publisher calls Hub.PublishAll: the message
// is framed once, queued in each connection's outbox, and written by a writer goroutine per
// connection that exists while its outbox is not empty, every batch in one system call.
//
// bcast-gust-loop: no Hub: the publisher writes one gust.PreparedMessage to every connection
// in turn with Conn.WritePrepared, from its own goroutine (a blocked socket would block it).

func init() {
	register("bcast-gust", "broadcast: github.com/gustws/gust Hub.PublishAll (echo until BROADCAST_CONNS)", func(addr string) (Server, error) {
		return startGustBroadcast(addr, false, true)
	})
	register("bcast-gust-deflate", "broadcast: as bcast-gust, with permessage-deflate", func(addr string) (Server, error) {
		return startGustBroadcast(addr, true, true)
	})
	register("bcast-gust-loop", "broadcast: github.com/gustws/gust PreparedMessage written to each connection in a loop", func(addr string) (Server, error) {
		return startGustBroadcast(addr, false, false)
	})
	register("bcast-gust-loop-deflate", "broadcast: as bcast-gust-loop, with permessage-deflate", func(addr string) (Server, error) {
		return startGustBroadcast(addr, true, false)
	})
}

type gustBroadcast struct {
	gustEcho
	trigger *bcastTrigger
	conns   *connSet[*gust.Conn]
}

func (g gustBroadcast) OnOpen(c *gust.Conn) {
	if g.conns != nil {
		g.conns.add(c)
	}
	g.trigger.opened()
}

func (g gustBroadcast) OnClose(c *gust.Conn, _ error) {
	if g.conns != nil {
		g.conns.remove(c)
	}
	g.trigger.closed()
}

func startGustBroadcast(addr string, deflate, useHub bool) (Server, error) {
	cfg := bcastConfigFromEnv()
	payload := bcastPayload(cfg.size)
	trigger := &bcastTrigger{cfg: cfg}
	h := gustBroadcast{trigger: trigger}
	var ev gust.Event = h
	// WriteTimeout off, as the peers have none: with compression, gustload (one core inflating
	// every stream) falls so far behind that a socket's send buffer, autotuned to megabytes,
	// stays too full to turn writable for longer than gust's default 10 s, and gust would cut
	// readers that are still reading (issue 15's note). The measurement is of throughput.
	opts := gust.Options{MaxMessageSize: MaxMessage, Compression: gust.CompressionOptions{Enabled: deflate}, WriteTimeout: -1}
	if useHub {
		// The flow control below bounds the messages queued over all connections, not on
		// each: gustload, one core serving every reader, serves them unevenly, and with the
		// default outbox of 256 an unlucky reader is now and then closed as slow (1008) in the
		// middle of a run. 4,096 keeps the policy in place for a reader that stalls.
		opts.OutboxSize, opts.OutboxPolicy = 4096, gust.OutboxCloseSlow
		hb := new(hub.Hub)
		ev = hb.Wrap(h)
		limit := int64(cfg.conns * cfg.window)
		trigger.run = func(stop func() bool) {
			for trigger.pace(func() int64 { return hb.Stats().Pending }, limit, stop) {
				if hb.PublishAll(gust.OpText, payload) != nil {
					return
				}
			}
		}
	} else {
		h.conns = &connSet[*gust.Conn]{}
		ev = h
		trigger.run = func(stop func() bool) {
			for trigger.pace(nil, 0, stop) {
				pm, err := gust.NewPreparedMessage(gust.OpText, payload)
				if err != nil {
					return
				}
				for _, c := range h.conns.list() {
					c.WritePrepared(pm) // a failed write ends the connection and reaches OnClose
				}
			}
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: ev, Options: opts}}
	go srv.Serve(ln)
	return gustServer{srv: srv, addr: ln.Addr().String()}, nil
}
