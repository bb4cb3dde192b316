// Package metrics counts what happens on gust connections: [Counters]
// implements [gust.Metrics] with atomic counters, which a program reads as a
// [Snapshot] or publishes with expvar in one line:
//
//	counters := new(metrics.Counters)
//	expvar.Publish("gust", counters) // served as JSON on /debug/vars
//	srv := &gust.Server{Upgrader: gust.Upgrader{Options: gust.Options{Metrics: counters}}}
//
// For Prometheus, the module github.com/gustws/gust/metrics/prometheus
// implements gust.Metrics with Prometheus counters and gauges.
package metrics

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/gustws/gust"
)

// The causes gust.Metrics.Closed reports, a fixed set (see [gust.Metrics]).
const (
	CausePeer     = "peer"     // the peer started the closing handshake
	CauseLocal    = "local"    // this side closed: Conn.Close, Conn.CloseNow
	CauseProtocol = "protocol" // the peer broke the protocol (1002, 1007)
	CauseLimit    = "limit"    // the peer went past a limit (1009)
	CauseTimeout  = "timeout"  // a write, read, heartbeat or close deadline passed
	CauseSlow     = "slow"     // the outbox overflowed under OutboxCloseSlow (1008)
	CausePanic    = "panic"    // a callback panicked (1011)
	CauseShutdown = "shutdown" // a Server's or Upgrader's Shutdown or Close
	CauseIO       = "io"       // the peer left without a close frame, or another network error
)

// Causes lists the causes, for code that sets up a series per cause ahead
// of time. It returns a new slice each time.
func Causes() []string {
	return []string{CausePeer, CauseLocal, CauseProtocol, CauseLimit, CauseTimeout,
		CauseSlow, CausePanic, CauseShutdown, CauseIO}
}

// The events the optional Netpoll method of gust.Metrics reports, a fixed
// set (see [gust.Metrics]): connections that netpoll mode could not put on
// an event loop, and connections whose serving held their loop.
const (
	NetpollFallbackFD   = "fallback-fd"   // descriptor limit: stays in goroutine mode
	NetpollFallbackType = "fallback-type" // not a plain socket (TLS gust did not make, HTTP/2, a wrapper)
	NetpollBlocked      = "blocked"       // held its event loop past 100 ms while a callback ran
	NetpollHeld         = "held"          // the same with no callback running: gust's work, or no CPU free
)

// NetpollEvents lists the netpoll events. It returns a new slice each
// time.
func NetpollEvents() []string {
	return []string{NetpollFallbackFD, NetpollFallbackType, NetpollBlocked, NetpollHeld}
}

// netpollIndex is event's slot in Counters.netpoll; 4 for an event outside
// the set.
func netpollIndex(event string) int {
	switch event {
	case NetpollFallbackFD:
		return 0
	case NetpollFallbackType:
		return 1
	case NetpollBlocked:
		return 2
	case NetpollHeld:
		return 3
	}
	return 4
}

// causeOther counts a cause outside the set, which a later gust might add.
const causeOther = "other"

// causeIndex is cause's slot in Counters.closedBy.
func causeIndex(cause string) int {
	switch cause {
	case CausePeer:
		return 0
	case CauseLocal:
		return 1
	case CauseProtocol:
		return 2
	case CauseLimit:
		return 3
	case CauseTimeout:
		return 4
	case CauseSlow:
		return 5
	case CausePanic:
		return 6
	case CauseShutdown:
		return 7
	case CauseIO:
		return 8
	}
	return 9
}

// Counters implements [gust.Metrics] with atomic counters, shared by every
// connection whose Options name it. Its zero value is ready to use; it is
// safe for concurrent use and must not be copied once in use. Each event
// costs an atomic add or two, and no allocation.
//
// It implements expvar.Var: String returns its Snapshot as JSON. Use one
// Counters per set of connections to count apart: the server's and a
// client's, say.
type Counters struct {
	handshakesAccepted atomic.Int64
	handshakesRefused  atomic.Int64
	opened             atomic.Int64
	closed             atomic.Int64
	closedBy           [10]atomic.Int64 // by causeIndex
	messagesIn         atomic.Int64
	messagesOut        atomic.Int64
	bytesIn            atomic.Int64
	bytesOut           atomic.Int64
	wireBytesIn        atomic.Int64
	wireBytesOut       atomic.Int64
	queued             atomic.Int64
	queuedTotal        atomic.Int64
	dropped            atomic.Int64
	netpoll            [5]atomic.Int64 // by netpollIndex
}

var _ gust.Metrics = (*Counters)(nil)

// Snapshot is what Counters counted, read at one time (each counter
// atomically; counters updated meanwhile may be read before or after the
// update). The JSON names are those String and expvar show.
type Snapshot struct {
	// HandshakesAccepted counts the handshakes that made a connection
	// (status 101, or 200 over HTTP/2); HandshakesRefused the others,
	// refused with an HTTP status or failed without one.
	HandshakesAccepted int64 `json:"handshakes_accepted"`
	HandshakesRefused  int64 `json:"handshakes_refused"`

	// Opened and Closed count the connections that started and ended;
	// Live is the difference, the connections open now.
	Opened int64 `json:"opened"`
	Closed int64 `json:"closed"`
	Live   int64 `json:"live"`

	// ClosedBy counts the connections that ended by cause (see [Causes]),
	// every cause present, at 0 if none ended so ("other" only if some
	// cause outside the set was counted).
	ClosedBy map[string]int64 `json:"closed_by_cause"`

	// MessagesIn and MessagesOut count the data messages received and
	// sent; BytesIn and BytesOut their payloads; WireBytesIn and
	// WireBytesOut their frames' payloads on the wire, after compression
	// (frame headers not counted).
	MessagesIn   int64 `json:"messages_in"`
	MessagesOut  int64 `json:"messages_out"`
	BytesIn      int64 `json:"bytes_in"`
	BytesOut     int64 `json:"bytes_out"`
	WireBytesIn  int64 `json:"wire_bytes_in"`
	WireBytesOut int64 `json:"wire_bytes_out"`

	// Queued is the number of messages waiting in outboxes now,
	// QueuedTotal the number ever queued, and Dropped the number the
	// outboxes refused or discarded when full.
	Queued      int64 `json:"queued"`
	QueuedTotal int64 `json:"queued_total"`
	Dropped     int64 `json:"dropped"`

	// Netpoll counts netpoll mode's events (see [NetpollEvents]), every
	// event present, at 0 if none happened ("other" only if some event
	// outside the set was counted).
	Netpoll map[string]int64 `json:"netpoll"`
}

// Snapshot returns the current counts.
func (c *Counters) Snapshot() Snapshot {
	s := Snapshot{
		HandshakesAccepted: c.handshakesAccepted.Load(),
		HandshakesRefused:  c.handshakesRefused.Load(),
		Closed:             c.closed.Load(),
		ClosedBy:           make(map[string]int64, len(c.closedBy)),
		MessagesIn:         c.messagesIn.Load(),
		MessagesOut:        c.messagesOut.Load(),
		BytesIn:            c.bytesIn.Load(),
		BytesOut:           c.bytesOut.Load(),
		WireBytesIn:        c.wireBytesIn.Load(),
		WireBytesOut:       c.wireBytesOut.Load(),
		Queued:             c.queued.Load(),
		QueuedTotal:        c.queuedTotal.Load(),
		Dropped:            c.dropped.Load(),
	}
	s.Opened = c.opened.Load() // after Closed: Live is never negative
	s.Live = s.Opened - s.Closed
	for _, cause := range Causes() {
		s.ClosedBy[cause] = c.closedBy[causeIndex(cause)].Load()
	}
	if n := c.closedBy[causeIndex(causeOther)].Load(); n > 0 {
		s.ClosedBy[causeOther] = n
	}
	s.Netpoll = make(map[string]int64, len(c.netpoll))
	for _, event := range NetpollEvents() {
		s.Netpoll[event] = c.netpoll[netpollIndex(event)].Load()
	}
	if n := c.netpoll[netpollIndex(causeOther)].Load(); n > 0 {
		s.Netpoll[causeOther] = n
	}
	return s
}

// String returns the Snapshot as JSON, which makes Counters an expvar.Var.
func (c *Counters) String() string {
	b, _ := json.Marshal(c.Snapshot()) // cannot fail: integers and a map of them
	return string(b)
}

// Handshake implements gust.Metrics.
func (c *Counters) Handshake(status int) {
	if status == http.StatusSwitchingProtocols || status == http.StatusOK {
		c.handshakesAccepted.Add(1)
	} else {
		c.handshakesRefused.Add(1)
	}
}

// Opened implements gust.Metrics.
func (c *Counters) Opened(*gust.Conn) { c.opened.Add(1) }

// Closed implements gust.Metrics.
func (c *Counters) Closed(_ *gust.Conn, _ gust.StatusCode, cause string) {
	c.closedBy[causeIndex(cause)].Add(1)
	c.closed.Add(1)
}

// Received implements gust.Metrics.
func (c *Counters) Received(_ *gust.Conn, _ gust.Opcode, payload, wire int) {
	c.messagesIn.Add(1)
	c.bytesIn.Add(int64(payload))
	c.wireBytesIn.Add(int64(wire))
}

// Sent implements gust.Metrics.
func (c *Counters) Sent(_ *gust.Conn, _ gust.Opcode, payload, wire int) {
	c.messagesOut.Add(1)
	c.bytesOut.Add(int64(payload))
	c.wireBytesOut.Add(int64(wire))
}

// Queued implements gust.Metrics.
func (c *Counters) Queued(_ *gust.Conn, n int) {
	c.queued.Add(int64(n))
	if n > 0 {
		c.queuedTotal.Add(int64(n))
	}
}

// Dropped implements gust.Metrics.
func (c *Counters) Dropped(_ *gust.Conn, n int) { c.dropped.Add(int64(n)) }

// Netpoll implements the optional method of gust.Metrics for netpoll
// mode's events.
func (c *Counters) Netpoll(_ *gust.Conn, event string) { c.netpoll[netpollIndex(event)].Add(1) }
