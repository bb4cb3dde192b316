// Command echo is the smallest gust server: it echoes every message back.
//
//	go run ./examples/echo            # serves ws://127.0.0.1:8080/
//	go run ./examples/echo -addr 127.0.0.1:9000
package main

import (
	"flag"
	"log"
	"net/http"
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

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	upgrader := &gust.Upgrader{Handler: echo{}}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered with the HTTP error
		}
		c.ReadLoop()
	})
	// http.ListenAndServe would set no timeouts: a client could hold a
	// connection for ever by sending its request head a byte at a time
	// (slowloris), or by sending nothing after a refused request.
	// ReadHeaderTimeout bounds the head and IdleTimeout the wait for the
	// next request; neither applies once Upgrade has taken the connection.
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	log.Printf("echo server on ws://%s/", *addr)
	log.Fatal(srv.ListenAndServe())
}
