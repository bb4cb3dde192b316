// Command echo is the smallest gust server: it echoes every message back.
// On SIGINT or SIGTERM it shuts down gracefully: every connection gets a
// close frame with 1001 (going away), and the server waits up to 5 seconds
// for them to end.
//
//	go run ./examples/echo            # serves ws://127.0.0.1:8080/ws
//	go run ./examples/echo -addr 127.0.0.1:9000
//	go run ./examples/client ws://127.0.0.1:8080/ws   # type lines, see them echoed
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gustws/gust"
)

type echo struct {
	gust.BuiltinEventHandler
}

func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	if err := c.WriteMessage(m.Opcode, m.Data); err != nil {
		log.Printf("write to %v: %v", c.RemoteAddr(), err)
	}
}

// serve echoes WebSockets at /ws on ln until ctx is done, then shuts down:
// the http.Server stops accepting and ends idle HTTP connections, and its
// RegisterOnShutdown hook has the Upgrader send each WebSocket (which
// net/http no longer tracks once hijacked) 1001 and wait for them, up to
// grace.
func serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	upgrader := &gust.Upgrader{Handler: echo{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered with the HTTP error
		}
		c.ReadLoop()
	})
	// http.Serve would set no timeouts: a client could hold a connection
	// for ever by sending its request head a byte at a time (slowloris), or
	// by sending nothing after a refused request. ReadHeaderTimeout bounds
	// the head and IdleTimeout the wait for the next request; neither
	// applies once Upgrade has taken the connection.
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	// The hook runs in a goroutine of its own when Shutdown starts, with
	// no context: it makes its own, and reports through wsDone.
	wsDone := make(chan error, 1)
	srv.RegisterOnShutdown(func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		wsDone <- upgrader.Shutdown(ctx)
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := errors.Join(srv.Shutdown(shutdown), <-wsDone)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Printf("echo server on ws://%s/ws", ln.Addr())
	if err := serve(ctx, ln, 5*time.Second); err != nil {
		log.Fatal(err)
	}
	log.Print("echo server: shut down")
}
