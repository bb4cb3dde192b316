package gust_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gustws/gust"
)

// opener echoes, and tells when a connection has opened.
type opener struct {
	echo
	opened chan struct{}
}

func (o *opener) OnOpen(*gust.Conn) { o.opened <- struct{}{} }

// A rolling restart without a reconnect storm: the health route says
// "draining" from the moment Drain starts, so that the load balancer sends
// new clients to the other instances, and the connections are closed with
// 1012 (service restart) at random times over the window, so that their
// clients come back spread over it.
func ExampleServer_Drain() {
	h := &opener{opened: make(chan struct{}, 1)}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if srv.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	srv.HTTPHandler = mux
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	addr := ln.Addr().String()
	health := func() {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println("health:", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	health()

	// A client that reads only later: until it answers its close frame,
	// the drain waits for it, and the Server goes on answering the health
	// route.
	in := newInbox()
	client, _, err := gust.Dial(context.Background(), "ws://"+addr, in, nil)
	if err != nil {
		log.Fatal(err)
	}
	<-h.opened // the Server has it too

	// On SIGTERM: close the connections over 100 ms (10 s or more in
	// production), each with 1012, then shut down; ctx bounds it all.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- srv.Drain(ctx, 100*time.Millisecond, 0) }()
	for !srv.Draining() {
		time.Sleep(time.Millisecond)
	}
	health()
	_, _, err = gust.Dial(context.Background(), "ws://"+addr, newInbox(), nil)
	var herr *gust.HandshakeError
	if errors.As(err, &herr) {
		fmt.Println("new connection refused:", herr.Status, "Retry-After", herr.Header.Get("Retry-After"))
	}

	go client.ReadLoop()
	fmt.Println("client closed:", gust.CloseStatus(<-in.closed))
	fmt.Println("Drain:", <-drained)
	// Output:
	// health: 200 ok
	// health: 503 draining
	// new connection refused: 503 Retry-After 1
	// client closed: ServiceRestart
	// Drain: <nil>
}
