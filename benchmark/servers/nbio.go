package servers

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// nbio: the nbhttp Engine in its default non-blocking mode (epoll pollers, no goroutine per
// connection), an Upgrader whose OnMessage writes the message back.

func init() {
	register("nbio", "github.com/lesismal/nbio: nbhttp Engine (non-blocking), Upgrader.OnMessage writes back", startNbio)
}

type nbioServer struct {
	engine *nbhttp.Engine
	addr   string
}

func startNbio(addr string) (Server, error) {
	up := websocket.NewUpgrader()
	up.MessageLengthLimit = MaxMessage
	up.OnMessage(func(c *websocket.Conn, mt websocket.MessageType, data []byte) {
		_ = c.WriteMessage(mt, data) // nbio closes the connection on a write error
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = up.Upgrade(w, r, nil) // on error nbio has already answered
	})
	return runNbio(nbhttp.Config{Addrs: []string{addr}, Handler: mux})
}

// runNbio starts an nbhttp engine on cfg (TCP, payloads released after
// each message) and reports the address it listens on.
func runNbio(cfg nbhttp.Config) (*nbioServer, error) {
	s := &nbioServer{}
	listened := make(chan string, 1)
	cfg.Network = "tcp"
	cfg.ReleaseWebsocketPayload = true
	cfg.Listen = func(network, a string) (net.Listener, error) {
		ln, err := net.Listen(network, a)
		if err == nil {
			listened <- ln.Addr().String()
		}
		return ln, err
	}
	s.engine = nbhttp.NewEngine(cfg)
	if err := s.engine.Start(); err != nil {
		return nil, err
	}
	s.addr = <-listened
	return s, nil
}

func (s *nbioServer) Addr() string { return s.addr }

func (s *nbioServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.engine.Shutdown(ctx)
}
