package metrics_test

import (
	"context"
	"expvar"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/gustws/gust"
	"github.com/gustws/gust/metrics"
)

// echo writes every message back; ended learns when a connection has ended.
type echo struct {
	gust.BuiltinEventHandler
	ended chan struct{}
}

func (e echo) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data)
	m.Close()
}

func (e echo) OnClose(*gust.Conn, error) { e.ended <- struct{}{} }

func ExampleCounters() {
	counters := new(metrics.Counters)
	h := echo{ended: make(chan struct{}, 1)}
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: h,
		Options: gust.Options{Metrics: counters},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String(), nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	go c.ReadLoop()
	c.WriteString("hello")
	c.WriteString("world")
	c.Close(gust.StatusNormalClosure, "")
	<-h.ended // Closed is reported before OnClose

	s := counters.Snapshot()
	fmt.Println("accepted:", s.HandshakesAccepted, "live:", s.Live)
	fmt.Println("closed by the peer:", s.ClosedBy[metrics.CausePeer])
	fmt.Println("in:", s.MessagesIn, "messages,", s.BytesIn, "bytes")
	// Output:
	// accepted: 1 live: 0
	// closed by the peer: 1
	// in: 2 messages, 10 bytes
}

// Counters is an expvar.Var: one line publishes it, and expvar serves it on
// /debug/vars of http.DefaultServeMux, as JSON.
func ExampleCounters_expvar() {
	counters := new(metrics.Counters)
	expvar.Publish("gust", counters)

	u := &gust.Upgrader{Options: gust.Options{Metrics: counters}}
	http.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if c, err := u.Upgrade(w, r); err == nil {
			c.ReadLoop()
		}
	})
	log.Fatal(http.ListenAndServe("localhost:8080", nil))
	// GET /debug/vars then shows, among the others:
	// "gust": {"handshakes_accepted": 1, "handshakes_refused": 0, "opened": 1, "closed": 0, "live": 1, ...}
}
