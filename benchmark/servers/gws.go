package servers

import (
	"net"
	"sync"

	"github.com/lxzan/gws"
)

// gws: gws.NewServer, gws's own accept loop and handshake parser, which runs ReadLoop in a
// goroutine per connection (the README's Quick Start; leaner than its Upgrader on net/http,
// which costs about 2.5 KiB more RSS per idle connection here). Events are emitted
// synchronously (ParallelEnabled false) and compression is off (gws-deflate turns it on).

func init() {
	register("gws", "github.com/lxzan/gws: NewServer, ReadLoop per connection, OnMessage writes back (parallel off)", func(addr string) (Server, error) {
		return startGWS(addr, gws.PermessageDeflate{})
	})
	// gws-deflate: PermessageDeflate with context takeover both ways, as gws's examples (echo,
	// chatroom, autobahn) set it; every other field at gws's default: level 1 (BestSpeed), window
	// bits 12 each way when context takeover is on (4 KiB windows; gws answers
	// client_max_window_bits=12 even when the client did not offer the parameter), threshold
	// 512 bytes (0 — compress everything — on the server's side once it keeps context), a pool
	// of 32 shared compressors.
	register("gws-deflate", "github.com/lxzan/gws: as gws, with PermessageDeflate{Enabled, ServerContextTakeover, ClientContextTakeover}", func(addr string) (Server, error) {
		return startGWS(addr, gws.PermessageDeflate{Enabled: true, ServerContextTakeover: true, ClientContextTakeover: true})
	})
	// gws-deflate-w15: the same with both window bits raised to 15 (32 KiB windows, as gust's
	// defaults). Below 15 bits gws compresses with flate.NewWriterWindow, klauspost's
	// custom-window encoder (a level-5-like one, whatever Level says); at 15 with
	// flate.NewWriter(Level 1). Not a default of the driver: -servers gws-deflate-w15.
	register("gws-deflate-w15", "github.com/lxzan/gws: as gws-deflate, with ServerMaxWindowBits and ClientMaxWindowBits 15", func(addr string) (Server, error) {
		return startGWS(addr, gws.PermessageDeflate{Enabled: true, ServerContextTakeover: true, ClientContextTakeover: true,
			ServerMaxWindowBits: 15, ClientMaxWindowBits: 15})
	})
}

type gwsEcho struct{ gws.BuiltinEventHandler }

func (gwsEcho) OnMessage(c *gws.Conn, m *gws.Message) {
	defer m.Close()
	_ = c.WriteMessage(m.Opcode, m.Bytes()) // gws reports write errors through OnClose
}

func startGWS(addr string, pmd gws.PermessageDeflate) (Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := gws.NewServer(gwsEcho{}, &gws.ServerOption{
		ParallelEnabled:    false,
		ReadMaxPayloadSize: MaxMessage,
		PermessageDeflate:  pmd,
	})
	srv.OnError = func(net.Conn, error) {} // a failed handshake is the client's business
	pl := &parkingListener{Listener: ln, closed: make(chan struct{})}
	go func() { _ = srv.RunListener(pl) }()
	return gwsServer{pl}, nil
}

type gwsServer struct{ ln *parkingListener }

func (s gwsServer) Addr() string { return s.ln.Addr().String() }
func (s gwsServer) Close() error { return s.ln.Close() }

// parkingListener parks Accept once closed: gws's RunListener retries Accept errors forever,
// and would spin on a closed listener.
type parkingListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func (l *parkingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		select {
		case <-l.closed:
			select {} // the process (or test binary) ends it
		default:
		}
	}
	return c, err
}

func (l *parkingListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
