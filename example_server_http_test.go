package gust_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

	"github.com/gustws/gust"
)

// A Server serves a health check and a metrics scrape on its WebSocket
// port: the requests that do not ask for a WebSocket go to HTTPHandler.
func ExampleServer_HTTPHandler() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "connections 1\n") // promhttp.Handler(), in a real service
	})
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: echo{}}, HTTPHandler: mux}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	addr := ln.Addr().String()

	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))

	in := newInbox()
	c := dial("ws://"+addr+"/", in)
	c.WriteString("hello")
	fmt.Println(<-in.messages)
	c.Close(gust.StatusNormalClosure, "")
	<-in.closed
	// Output:
	// 200 ok
	// hello
}
