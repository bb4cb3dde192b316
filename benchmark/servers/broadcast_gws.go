package servers

import (
	"net"
	"sync/atomic"

	"github.com/lxzan/gws"
)

// bcast-gws: gws.NewServer (as the gws echo server) and gws's Broadcaster, as its README shows
// it: one NewBroadcaster per message, Broadcast(conn) for every connection (it frames and
// compresses the message once and queues a write on each connection's own write queue), then
// Close. Flow control: behind every window/2-th broadcast the publisher queues a marker
// (conn.Async) on each connection and waits while more than one marker per connection is
// outstanding, so at most about `window` messages wait on any connection.

func init() {
	register("bcast-gws", "broadcast: github.com/lxzan/gws Broadcaster (echo until BROADCAST_CONNS)", func(addr string) (Server, error) {
		return startGWSBroadcast(addr, gws.PermessageDeflate{})
	})
	register("bcast-gws-deflate", "broadcast: as bcast-gws, with PermessageDeflate (context takeover)", func(addr string) (Server, error) {
		return startGWSBroadcast(addr, gws.PermessageDeflate{Enabled: true, ServerContextTakeover: true, ClientContextTakeover: true})
	})
	// bcast-gws-w15-deflate: window bits 15 each way, as gust's defaults (gws answers 12 unless
	// told): the receivers keep 32 KiB windows, as they do for gust's broadcasts.
	register("bcast-gws-w15-deflate", "broadcast: as bcast-gws-deflate, with ServerMaxWindowBits and ClientMaxWindowBits 15", func(addr string) (Server, error) {
		return startGWSBroadcast(addr, gws.PermessageDeflate{Enabled: true, ServerContextTakeover: true, ClientContextTakeover: true,
			ServerMaxWindowBits: 15, ClientMaxWindowBits: 15})
	})
}

type gwsBroadcast struct {
	gwsEcho
	trigger *bcastTrigger
	conns   *connSet[*gws.Conn]
}

func (g gwsBroadcast) OnOpen(c *gws.Conn) {
	g.conns.add(c)
	g.trigger.opened()
}

func (g gwsBroadcast) OnClose(c *gws.Conn, _ error) {
	g.conns.remove(c)
	g.trigger.closed()
}

func startGWSBroadcast(addr string, pmd gws.PermessageDeflate) (Server, error) {
	cfg := bcastConfigFromEnv()
	feed := newBcastFeed(cfg.size)
	h := gwsBroadcast{trigger: &bcastTrigger{cfg: cfg}, conns: &connSet[*gws.Conn]{}}
	var markers atomic.Int64
	every := max(cfg.window/2, 1)
	h.trigger.run = func(stop func() bool) {
		for round := 0; ; round++ {
			if cfg.interval > 0 && !h.trigger.pace(nil, 0, stop) {
				return
			}
			conns := h.conns.list()
			b := gws.NewBroadcaster(gws.OpcodeText, feed.next())
			for _, c := range conns {
				_ = b.Broadcast(c) // errors reach OnClose
			}
			_ = b.Close()
			if cfg.interval == 0 && round%every == every-1 {
				for _, c := range conns {
					markers.Add(1)
					c.Async(func() { markers.Add(-1) })
				}
				if !waitBelow(markers.Load, int64(len(conns)), stop) {
					return
				}
			}
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := gws.NewServer(h, &gws.ServerOption{ReadMaxPayloadSize: MaxMessage, PermessageDeflate: pmd})
	srv.OnError = func(net.Conn, error) {}
	pl := &parkingListener{Listener: ln, closed: make(chan struct{})}
	go func() { _ = srv.RunListener(pl) }()
	return gwsServer{pl}, nil
}
