// Command h2 serves WebSockets over HTTP/2 (RFC 8441): a page, served over
// HTTPS with HTTP/2, opens several WebSockets to wss://same-host/ws, and
// the browser carries them all as streams of the one TLS connection the
// page came over, with no extra handshake round trip. gust's Upgrader
// answers both the HTTP/2 extended CONNECT and the HTTP/1.1 Upgrade, with
// permessage-deflate on, and echoes every message.
//
//	go run ./examples/h2                        # https://127.0.0.1:8443/
//	go run ./examples/h2 -addr 127.0.0.1:9443
//
// Open the address in a browser and accept the certificate warning: the
// certificate is self-signed, made at start-up (ECDSA P-256, valid for
// 127.0.0.1, ::1 and localhost for a day); its SHA-256 SPKI fingerprint is
// logged, for Chromium's --ignore-certificate-errors-spki-list. The page
// shows, per WebSocket, the echoes and the close; /stats (JSON) shows how
// many TCP connections the server accepted, how many of them carried
// WebSockets, and how many WebSockets came over HTTP/2 and over HTTP/1.1.
// ?n=8 on the page's URL opens 8 WebSockets (default 4).
//
// # GODEBUG=http2xconnect=1
//
// Go's HTTP/2 server offers extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL)
// only when the process starts with GODEBUG=http2xconnect=1: net/http reads
// the variable once, at init, and Go leaves it off by default
// (golang/go#71128). Without it browsers fall back to one HTTP/1.1
// connection per WebSocket. So when GODEBUG lacks an http2xconnect setting,
// main re-executes its own binary (syscall.Exec, same arguments, same
// process id) with http2xconnect=1 added to GODEBUG, and logs that it did.
// Under `go run` that binary is the one go run built in a temporary
// directory, which is fine. To avoid the re-exec, set the variable yourself:
//
//	GODEBUG=http2xconnect=1 go run ./examples/h2
//
// A program of your own can do the same in its environment, or re-execute
// itself as this one does. GODEBUG=http2xconnect=0 is respected: the
// server then serves WebSockets over HTTP/1.1 only.
//
// Go's HTTP/2 server allows 250 concurrent streams per connection by
// default; http.Server.HTTP2.MaxConcurrentStreams raises that when one
// page holds more WebSockets.
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

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "address to listen on (HTTPS, HTTP/2 and HTTP/1.1)")
	flag.Parse()
	log.SetPrefix("h2: ")

	ensureExtendedConnect()

	cert, fingerprint, err := selfSignedCert("127.0.0.1", "::1", "localhost")
	if err != nil {
		log.Fatalf("self-signed certificate: %v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := newServer(cert, log.Default())
	log.Printf("certificate: self-signed ECDSA P-256, SPKI sha256 %s", fingerprint)
	log.Printf("extended CONNECT (WebSocket over HTTP/2): %v", extendedConnectEnabled())
	log.Printf("serving https://%s/ (page), wss://%s/ws (echo), https://%s/stats",
		ln.Addr(), ln.Addr(), ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- s.serve(ln) }()
	select {
	case err := <-served:
		log.Fatal(err)
	case <-ctx.Done():
	}
	log.Printf("shutting down: %s", s.statsLine())
	s.closeAll(gust.StatusGoingAway, "server shutting down", 2*time.Second)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Shutdown does not wait for hijacked or upgraded connections; Close
	// ends the HTTP/2 connections and so their WebSocket streams.
	if err := s.http.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Print(err)
	}
	s.http.Close()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
	}
}
