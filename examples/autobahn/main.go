// Command autobahn is the echo server the Autobahn TestSuite's fuzzing
// client tests: every message is echoed back, UTF-8 is checked,
// permessage-deflate is accepted (with context takeover; -compress=false
// turns it off), and either server path can be chosen.
//
//	go run ./examples/autobahn -addr 127.0.0.1:9001 -server upgrader
//	go run ./examples/autobahn -addr 127.0.0.1:9001 -server server
//	go run ./examples/autobahn -addr 127.0.0.1:9001 -server server -netpoll
//	go run ./examples/autobahn -addr 127.0.0.1:9001 -server server -netpoll -tls
//
// With -tls it serves wss:// with a self-signed certificate made at start
// (wstest's fuzzing client does not verify it).
package main

import (
	"context"
	"crypto/tls"
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
	"github.com/gustws/gust/internal/selfsigned"
)

type echo struct {
	gust.BuiltinEventHandler
}

func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data) // a failed write ends the connection and reaches OnClose
	m.Close()
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9001", "address to listen on")
	path := flag.String("server", "upgrader", "server path: upgrader (net/http) or server (gust's own)")
	compress := flag.Bool("compress", true, "accept permessage-deflate, with context takeover")
	netpoll := flag.Bool("netpoll", false, "netpoll mode (Options.Netpoll): idle connections hold no goroutine")
	useTLS := flag.Bool("tls", false, "serve wss:// with a self-signed certificate (on the server path, netpoll mode serves it on its loops)")
	flag.Parse()

	opts := gust.Options{Compression: gust.CompressionOptions{Enabled: *compress}, Netpoll: *netpoll}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	scheme, tlsConfig := "ws", (*tls.Config)(nil)
	if *useTLS {
		scheme, tlsConfig = "wss", &tls.Config{Certificates: []tls.Certificate{selfSigned()}}
	}
	log.Printf("autobahn echo server (%s path, netpoll %v) on %s://%s", *path, *netpoll, scheme, ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch *path {
	case "upgrader":
		upgrader := &gust.Upgrader{Handler: echo{}, Options: opts}
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := upgrader.Upgrade(w, r)
				if err != nil {
					return
				}
				c.ReadLoop() // with -netpoll it returns at once: nothing may follow it
			}),
			ReadHeaderTimeout: 10 * time.Second, // slowloris; the Server path has HandshakeTimeout
			IdleTimeout:       60 * time.Second,
			TLSConfig:         tlsConfig,
		}
		if tlsConfig != nil {
			go srv.ServeTLS(ln, "", "") // net/http's TLS: goroutine mode, even with -netpoll
		} else {
			go srv.Serve(ln)
		}
		<-ctx.Done()
		// net/http's Shutdown does not cover hijacked connections: the
		// Upgrader's closes them with 1001.
		shutdown(func(ctx context.Context) error {
			return errors.Join(srv.Shutdown(ctx), upgrader.Shutdown(ctx))
		})
	case "server":
		srv := &gust.Server{Upgrader: gust.Upgrader{Handler: echo{}, Options: opts}, TLSConfig: tlsConfig}
		if tlsConfig != nil {
			go srv.ServeTLS(ln, "", "")
		} else {
			go srv.Serve(ln)
		}
		<-ctx.Done()
		shutdown(srv.Shutdown)
	default:
		log.Fatalf("unknown -server %q: want upgrader or server", *path)
	}
}

func shutdown(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		log.Print(err)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and localhost.
func selfSigned() tls.Certificate {
	cert, err := selfsigned.Cert(nil, "127.0.0.1", "localhost")
	if err != nil {
		log.Fatal(err)
	}
	return cert
}
