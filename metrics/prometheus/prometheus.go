// Package prometheus exports what happens on gust connections as Prometheus
// metrics: [Collector] implements [gust.Metrics] with counters and gauges of
// github.com/prometheus/client_golang, registered on the Registerer you
// pass. It is a module of its own, so that importing gust pulls no
// Prometheus code.
//
//	collector, err := prometheus.New(registry) // or nil: the default registerer
//	u := &gust.Upgrader{Options: gust.Options{Metrics: collector}}
//	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
//
// # Metrics
//
// Every name has the prefix gust_; counters end in _total, byte counts in
// _bytes_total; labels take a few values each:
//
//	gust_handshakes_total{status}             handshakes by HTTP status: "101" (or "200" over
//	                                          HTTP/2) accepted; "400", "403", ... refused; "0"
//	                                          failed without a status
//	gust_connections_opened_total             connections started
//	gust_connections_closed_total{cause,code} connections ended, by cause ("peer", "local",
//	                                          "protocol", "limit", "timeout", "slow", "panic",
//	                                          "shutdown", "io": see gust.Metrics) and close
//	                                          code ("1000" to "1015"; "3xxx" and "4xxx" for
//	                                          the application ranges)
//	gust_connections_active                   connections open now (a gauge)
//	gust_messages_received_total{type}        data messages received, "text" or "binary"
//	gust_messages_sent_total{type}            data messages sent
//	gust_received_bytes_total                 their payload bytes
//	gust_sent_bytes_total
//	gust_received_wire_bytes_total            their frames' payload bytes on the wire, after
//	gust_sent_wire_bytes_total                compression (frame headers not counted)
//	gust_outbox_messages                      messages waiting in outboxes now (a gauge)
//	gust_outbox_queued_total                  messages queued in outboxes
//	gust_outbox_dropped_total                 messages outboxes refused or discarded when full
//	gust_netpoll_events_total{event}          netpoll mode's events (see gust.Metrics):
//	                                          "fallback-fd" and "fallback-type", connections
//	                                          left in goroutine mode; "blocked", a connection
//	                                          that held its event loop past 100 ms while a
//	                                          callback ran; "held", the same with none running
//
// A Hub's own counters (delivered, dropped, pending, recoveries, gaps, what
// its history and presence hold) come from a second collector, [NewHub],
// read at each scrape: see [HubCollector] for its metrics.
//
// To count two sets of connections apart in one registry (a server's and a
// client's), give each Collector a registerer wrapped with the same label
// name and a value of its own, since Prometheus wants every series of a
// name to have the same label names:
//
//	server, err := prometheus.New(prom.WrapRegistererWith(prom.Labels{"side": "server"}, registry))
//	client, err := prometheus.New(prom.WrapRegistererWith(prom.Labels{"side": "client"}, registry))
package prometheus

import (
	"strconv"

	"github.com/gustws/gust"
	prom "github.com/prometheus/client_golang/prometheus"
)

// Collector implements [gust.Metrics] with Prometheus metrics. Make one with
// [New] and set it in gust.Options.Metrics of every Upgrader, Server or
// DialOptions whose connections it should count. It is safe for concurrent
// use; each message costs a few atomic adds on metrics resolved ahead of
// time, and no allocation.
type Collector struct {
	handshakes *prom.CounterVec
	statuses   map[int]prom.Counter // the statuses gust answers with, resolved ahead

	opened prom.Counter
	closed *prom.CounterVec
	active prom.Gauge

	received, sent           [3]prom.Counter // by opcode: [1] text, [2] binary
	receivedBytes, sentBytes prom.Counter
	receivedWire, sentWire   prom.Counter

	outboxWaiting prom.Gauge
	outboxQueued  prom.Counter
	outboxDropped prom.Counter

	netpoll       *prom.CounterVec
	netpollEvents map[string]prom.Counter // the events gust reports, resolved ahead
}

var _ gust.Metrics = (*Collector)(nil)

// knownStatuses are the statuses gust reports: resolved when the Collector
// is made, so that they appear at 0 from the first scrape.
var knownStatuses = []int{0, 101, 200, 400, 403, 405, 426, 431, 500, 503}

// knownNetpollEvents are the events gust's optional Metrics method Netpoll
// reports, resolved when the Collector is made.
var knownNetpollEvents = []string{"fallback-fd", "fallback-type", "blocked", "held"}

// New makes a Collector and registers its metrics on reg; a nil reg means
// prometheus.DefaultRegisterer. It returns the registration's error, such as
// prometheus.AlreadyRegisteredError when reg holds a gust Collector's
// metrics already, and then leaves none of its metrics registered.
func New(reg prom.Registerer) (*Collector, error) {
	if reg == nil {
		reg = prom.DefaultRegisterer
	}
	counter := func(name, help string) prom.Counter {
		return prom.NewCounter(prom.CounterOpts{Namespace: "gust", Name: name, Help: help})
	}
	c := &Collector{
		handshakes: prom.NewCounterVec(prom.CounterOpts{Namespace: "gust", Name: "handshakes_total",
			Help: "WebSocket handshakes by HTTP status: 101 (200 over HTTP/2) accepted, others refused, 0 failed without a status."},
			[]string{"status"}),
		statuses: make(map[int]prom.Counter, len(knownStatuses)),
		opened:   counter("connections_opened_total", "WebSocket connections started."),
		closed: prom.NewCounterVec(prom.CounterOpts{Namespace: "gust", Name: "connections_closed_total",
			Help: "WebSocket connections ended, by cause and close code."},
			[]string{"cause", "code"}),
		active: prom.NewGauge(prom.GaugeOpts{Namespace: "gust", Name: "connections_active",
			Help: "WebSocket connections open now."}),
		receivedBytes: counter("received_bytes_total", "Payload bytes of the data messages received."),
		sentBytes:     counter("sent_bytes_total", "Payload bytes of the data messages sent."),
		receivedWire:  counter("received_wire_bytes_total", "Frame payload bytes of the data messages received, as they came on the wire (compressed or not)."),
		sentWire:      counter("sent_wire_bytes_total", "Frame payload bytes of the data messages sent, after compression."),
		outboxWaiting: prom.NewGauge(prom.GaugeOpts{Namespace: "gust", Name: "outbox_messages",
			Help: "Messages waiting in outboxes now."}),
		outboxQueued:  counter("outbox_queued_total", "Messages queued in outboxes."),
		outboxDropped: counter("outbox_dropped_total", "Messages outboxes refused or discarded when full."),
		netpoll: prom.NewCounterVec(prom.CounterOpts{Namespace: "gust", Name: "netpoll_events_total",
			Help: "Netpoll mode's events: connections left in goroutine mode (fallback-fd, fallback-type), connections that held their event loop (blocked)."},
			[]string{"event"}),
		netpollEvents: make(map[string]prom.Counter, len(knownNetpollEvents)),
	}
	for _, e := range knownNetpollEvents {
		c.netpollEvents[e] = c.netpoll.WithLabelValues(e)
	}
	received := prom.NewCounterVec(prom.CounterOpts{Namespace: "gust", Name: "messages_received_total",
		Help: "Data messages received, by type."}, []string{"type"})
	sent := prom.NewCounterVec(prom.CounterOpts{Namespace: "gust", Name: "messages_sent_total",
		Help: "Data messages sent, by type."}, []string{"type"})
	for _, op := range []gust.Opcode{gust.OpText, gust.OpBinary} {
		c.received[op] = received.WithLabelValues(op.String())
		c.sent[op] = sent.WithLabelValues(op.String())
	}
	for _, s := range knownStatuses {
		c.statuses[s] = c.handshakes.WithLabelValues(strconv.Itoa(s))
	}
	all := []prom.Collector{c.handshakes, c.opened, c.closed, c.active, received, sent,
		c.receivedBytes, c.sentBytes, c.receivedWire, c.sentWire, c.outboxWaiting, c.outboxQueued, c.outboxDropped,
		c.netpoll}
	for i, m := range all {
		if err := reg.Register(m); err != nil {
			for _, r := range all[:i] { // all or nothing
				reg.Unregister(r)
			}
			return nil, err
		}
	}
	return c, nil
}

// Handshake implements gust.Metrics.
func (c *Collector) Handshake(status int) {
	if m, ok := c.statuses[status]; ok {
		m.Inc()
		return
	}
	c.handshakes.WithLabelValues(strconv.Itoa(status)).Inc()
}

// Opened implements gust.Metrics.
func (c *Collector) Opened(*gust.Conn) {
	c.opened.Inc()
	c.active.Inc()
}

// Closed implements gust.Metrics.
func (c *Collector) Closed(_ *gust.Conn, code gust.StatusCode, cause string) {
	c.closed.WithLabelValues(cause, codeLabel(code)).Inc()
	c.active.Dec()
}

// codeLabel is the close code as a label value: the code itself below 3000
// (the RFC's codes), its range above, where applications choose codes
// freely.
func codeLabel(code gust.StatusCode) string {
	switch {
	case code >= 4000:
		return "4xxx"
	case code >= 3000:
		return "3xxx"
	}
	return strconv.Itoa(int(code))
}

// Received implements gust.Metrics.
func (c *Collector) Received(_ *gust.Conn, op gust.Opcode, payload, wire int) {
	if int(op) < len(c.received) && c.received[op] != nil {
		c.received[op].Inc()
	}
	c.receivedBytes.Add(float64(payload))
	c.receivedWire.Add(float64(wire))
}

// Sent implements gust.Metrics.
func (c *Collector) Sent(_ *gust.Conn, op gust.Opcode, payload, wire int) {
	if int(op) < len(c.sent) && c.sent[op] != nil {
		c.sent[op].Inc()
	}
	c.sentBytes.Add(float64(payload))
	c.sentWire.Add(float64(wire))
}

// Queued implements gust.Metrics.
func (c *Collector) Queued(_ *gust.Conn, n int) {
	c.outboxWaiting.Add(float64(n))
	if n > 0 {
		c.outboxQueued.Add(float64(n))
	}
}

// Dropped implements gust.Metrics.
func (c *Collector) Dropped(_ *gust.Conn, n int) { c.outboxDropped.Add(float64(n)) }

// Netpoll implements the optional method of gust.Metrics for netpoll
// mode's events.
func (c *Collector) Netpoll(_ *gust.Conn, event string) {
	if m, ok := c.netpollEvents[event]; ok {
		m.Inc()
		return
	}
	c.netpoll.WithLabelValues(event).Inc()
}
