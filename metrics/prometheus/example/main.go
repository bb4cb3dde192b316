// Command example is a gust echo server that exports its metrics for
// Prometheus: WebSockets on /ws, the metrics on /metrics.
//
//	go run . -addr 127.0.0.1:8080
//	curl -s 127.0.0.1:8080/metrics | grep ^gust_
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gustws/gust"
	gustprom "github.com/gustws/gust/metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s, err := newServer()
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("WebSockets on ws://%s/ws, metrics on http://%s/metrics", ln.Addr(), ln.Addr())
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.shutdown(ctx)
	}()
	if err := s.http.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// server is the example's HTTP server, its WebSockets and their metrics.
type server struct {
	http     *http.Server
	upgrader *gust.Upgrader
}

// newServer wires the echo server to a registry of its own, with the Go
// runtime's and the process's metrics besides gust's.
func newServer() (*server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := gustprom.New(reg)
	if err != nil {
		return nil, err
	}
	u := &gust.Upgrader{
		Handler: echo{},
		Options: gust.Options{Metrics: metrics, Compression: gust.CompressionOptions{Enabled: true}},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err != nil {
			return // refused, answered, and counted
		}
		c.ReadLoop()
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &server{
		http:     &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		upgrader: u,
	}, nil
}

// shutdown stops the HTTP server, then the WebSockets (net/http's Shutdown
// does not cover them).
func (s *server) shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if werr := s.upgrader.Shutdown(ctx); err == nil {
		err = werr
	}
	return err
}

// echo sends every message back.
type echo struct{ gust.BuiltinEventHandler }

func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data)
	m.Close()
}
