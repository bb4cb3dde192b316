// Command echo is the smallest gust server: it echoes every message back.
//
//	go run ./examples/echo            # serves ws://127.0.0.1:8080/
//	go run ./examples/echo -addr 127.0.0.1:9000
package main

import (
	"flag"
	"log"
	"net/http"

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

	upgrader := gust.NewUpgrader(echo{}, nil)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r)
		if err != nil {
			return // Upgrade has answered with the HTTP error
		}
		c.ReadLoop()
	})
	log.Printf("echo server on ws://%s/", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
