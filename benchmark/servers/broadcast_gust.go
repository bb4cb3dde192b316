package servers

import (
	"net"
	"sync/atomic"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// bcast-gust: a gust.Server with a hub.Hub (gust.OutboxCloseSlow, outboxes of 4,096 messages);
// every connection joins through Hub.Wrap and the publisher calls Hub.PublishAll: the message
// is framed (and compressed) once, queued in each connection's outbox, and written by a writer
// goroutine per connection that exists while its outbox is not empty, every batch in one
// system call.
//
// bcast-gust-loop: no Hub: the publisher writes one gust.PreparedMessage to every connection
// in turn with Conn.WritePrepared, from its own goroutine (a blocked socket would block it).
//
// The compression variants (permessage-deflate with context takeover unless said otherwise):
// bcast-gust-deflate and bcast-gust-loop-deflate share one compressed frame among all the
// connections (a PreparedMessage is compressed once, from an empty window, and each connection
// forgets its context for it); bcast-gust-nocontext-deflate is the Hub with
// server_no_context_takeover (CompressionOptions.NoContextTakeover), which shares the same frame
// and keeps nothing per connection; bcast-gust-percon-deflate queues the message on each
// connection with Conn.WriteAsync, so that each compresses it against its own context (the
// messages before), as many times as there are connections. bcast-gust-netpoll and
// bcast-gust-netpoll-deflate are the Hub in netpoll mode.

// gustBcast is how a gust broadcast server publishes.
type gustBcast struct {
	deflate, noContext, netpoll bool
	route                       string // "hub", "loop" (WritePrepared) or "percon" (WriteAsync)
}

func init() {
	for _, v := range []struct {
		name, doc string
		b         gustBcast
	}{
		{"bcast-gust", "broadcast: github.com/gustws/gust Hub.PublishAll (echo until BROADCAST_CONNS)", gustBcast{route: "hub"}},
		{"bcast-gust-deflate", "broadcast: as bcast-gust, with permessage-deflate", gustBcast{route: "hub", deflate: true}},
		{"bcast-gust-loop", "broadcast: github.com/gustws/gust PreparedMessage written to each connection in a loop", gustBcast{route: "loop"}},
		{"bcast-gust-loop-deflate", "broadcast: as bcast-gust-loop, with permessage-deflate", gustBcast{route: "loop", deflate: true}},
		{"bcast-gust-netpoll", "broadcast: as bcast-gust, in netpoll mode", gustBcast{route: "hub", netpoll: true}},
		{"bcast-gust-netpoll-deflate", "broadcast: as bcast-gust-netpoll, with permessage-deflate", gustBcast{route: "hub", netpoll: true, deflate: true}},
		{"bcast-gust-nocontext-deflate", "broadcast: as bcast-gust-deflate, with server_no_context_takeover", gustBcast{route: "hub", deflate: true, noContext: true}},
		{"bcast-gust-percon-deflate", "broadcast: Conn.WriteAsync to each connection, compressed per connection with its context", gustBcast{route: "percon", deflate: true}},
	} {
		register(v.name, v.doc, func(addr string) (Server, error) { return startGustBroadcast(addr, v.b) })
	}
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

func startGustBroadcast(addr string, b gustBcast) (Server, error) {
	cfg := bcastConfigFromEnv()
	feed := newBcastFeed(cfg.size)
	trigger := &bcastTrigger{cfg: cfg}
	h := gustBroadcast{trigger: trigger}
	var ev gust.Event = h
	// WriteTimeout off, as the peers have none: with compression, gustload (one core inflating
	// every stream) falls so far behind that a socket's send buffer, autotuned to megabytes,
	// stays too full to turn writable for longer than gust's default 10 s, and gust would cut
	// readers that are still reading (issue 15's note). The measurement is of throughput.
	opts := gust.Options{MaxMessageSize: MaxMessage, WriteTimeout: -1, Netpoll: b.netpoll,
		Compression: gust.CompressionOptions{Enabled: b.deflate, NoContextTakeover: b.noContext}}
	limit := int64(cfg.conns * cfg.window)
	switch b.route {
	case "hub":
		// The flow control below bounds the messages queued over all connections, not on
		// each: gustload, one core serving every reader, serves them unevenly, and with the
		// default outbox of 256 an unlucky reader is now and then closed as slow (1008) in the
		// middle of a run. 4,096 keeps the policy in place for a reader that stalls.
		opts.OutboxSize, opts.OutboxPolicy = 4096, gust.OutboxCloseSlow
		hb := new(hub.Hub)
		ev = hb.Wrap(h)
		trigger.run = func(stop func() bool) {
			for trigger.pace(func() int64 { return hb.Stats().Pending }, limit, stop) {
				if hb.PublishAll(gust.OpText, feed.next()) != nil {
					return
				}
			}
		}
	case "percon":
		opts.OutboxSize, opts.OutboxPolicy = 4096, gust.OutboxCloseSlow
		h.conns = &connSet[*gust.Conn]{}
		ev = h
		var pending atomic.Int64
		done := func(error) { pending.Add(-1) }
		trigger.run = func(stop func() bool) {
			for trigger.pace(pending.Load, limit, stop) {
				p := feed.next() // never changed: WriteAsync may hold it until done
				for _, c := range h.conns.list() {
					pending.Add(1)
					if c.WriteAsync(gust.OpText, p, done) != nil {
						pending.Add(-1) // a closed connection: OnClose has it
					}
				}
			}
		}
	default: // loop
		h.conns = &connSet[*gust.Conn]{}
		ev = h
		trigger.run = func(stop func() bool) {
			for trigger.pace(nil, 0, stop) {
				pm, err := gust.NewPreparedMessage(gust.OpText, feed.next())
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
