package prometheus_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gustws/gust"
	gustprom "github.com/gustws/gust/metrics/prometheus"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// One Collector counts a Server's connections; promhttp serves them on
// /metrics for Prometheus to scrape, beside the WebSockets on /ws.
func ExampleNew() {
	reg := prom.NewRegistry()
	collector, err := gustprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	h := echo{ended: make(chan struct{}, 1)}
	u := &gust.Upgrader{Handler: h, Options: gust.Options{Metrics: collector}}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if c, err := u.Upgrade(w, r); err == nil {
			c.ReadLoop()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()

	c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	go c.ReadLoop()
	c.WriteString("hello")
	c.WriteString("world")
	c.Close(gust.StatusNormalClosure, "")
	<-h.ended // Closed is reported before OnClose

	res, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{
			`gust_handshakes_total{status="101"}`,
			"gust_connections_opened_total",
			`gust_connections_closed_total{cause="peer",code="1000"}`,
			"gust_connections_active",
			`gust_messages_received_total{type="text"}`,
			"gust_received_bytes_total",
		} {
			if strings.HasPrefix(line, name+" ") {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// gust_connections_active 0
	// gust_connections_closed_total{cause="peer",code="1000"} 1
	// gust_connections_opened_total 1
	// gust_handshakes_total{status="101"} 1
	// gust_messages_received_total{type="text"} 2
	// gust_received_bytes_total 10
}
