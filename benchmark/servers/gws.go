package servers

import (
	"net"
	"sync"

	"github.com/lxzan/gws"
)

// gws: gws.NewServer, gws's own accept loop and handshake parser, which runs ReadLoop in a
// goroutine per connection (the README's Quick Start; leaner than its Upgrader on net/http,
// which costs about 2.5 KiB more RSS per idle connection here). Events are emitted
// synchronously (ParallelEnabled false) and compression is off.

func init() {
	register("gws", "github.com/lxzan/gws: NewServer, ReadLoop per connection, OnMessage writes back (parallel off)", startGWS)
}

type gwsEcho struct{ gws.BuiltinEventHandler }

func (gwsEcho) OnMessage(c *gws.Conn, m *gws.Message) {
	defer m.Close()
	_ = c.WriteMessage(m.Opcode, m.Bytes()) // gws reports write errors through OnClose
}

func startGWS(addr string) (Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := gws.NewServer(gwsEcho{}, &gws.ServerOption{
		ParallelEnabled:    false,
		ReadMaxPayloadSize: MaxMessage,
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
