package gust

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// Metrics receives what happens on connections, for counters and gauges.
// Set one in Options.Metrics; github.com/gustws/gust/metrics implements it
// for expvar, github.com/gustws/gust/metrics/prometheus for Prometheus.
//
// The methods are called synchronously where the event happens, from many
// connections at once: they must be safe for concurrent use and must not
// block or panic. Sent, Queued and Dropped may run under a lock of c's
// writes or outbox: they must not write to c, queue on it or Close it
// (CloseNow is fine). Unset, each event costs one nil check; set, one
// interface call and no allocation.
//
// # Close causes
//
// Closed's cause, fit for a label, says what the error OnClose receives is:
//
//   - "panic": a callback panicked ([*PanicError]); gust sent 1011.
//   - "slow": [ErrSlowConsumer], under OutboxCloseSlow; gust sent 1008.
//   - "limit": a message over MaxMessageSize ([*ProtocolError], 1009).
//   - "protocol": any other *ProtocolError (1002, 1007).
//   - "peer": the peer started the closing handshake ([*CloseError].ByPeer).
//   - "shutdown": a Server's or Upgrader's Shutdown, Drain or Close ended
//     it ([ErrServerClosed], or Shutdown's 1001 or Drain's code, answered
//     or not).
//   - "local": [Conn.Close] answered by the peer, or [Conn.CloseNow].
//   - "timeout": Options.WriteTimeout, heartbeats gone unanswered, a read
//     deadline, Options.MessageTimeout (gust sent 1008), or CloseTimeout.
//   - "io": anything else: EOF without a close frame, a reset.
//
// # Netpoll mode
//
// A Metrics may also have a method Netpoll(c *Conn, event string), found
// by a type assertion, told of what a user must know of netpoll mode (each
// also logged at level Warn, at most once a second per kind):
//
//   - "fallback-fd": c stays in goroutine mode: its descriptor could not
//     be duplicated or added to an event loop (most often EMFILE).
//   - "fallback-type": c stays in goroutine mode: it is not a plain TCP or
//     Unix socket (TLS gust did not make, an HTTP/2 stream, a wrapper).
//   - "blocked": serving c held its event loop past 100 ms, and one of its
//     callbacks ran meanwhile: most often a callback that waits.
//   - "held": the same, but no callback ran: the time went to gust's own
//     work (a large message, TLS) or to the loop waiting for a CPU on a
//     machine too busy to run it.
type Metrics interface {
	// Handshake reports a handshake's outcome, on either side: 101 (200 over
	// HTTP/2) when accepted, the refusal's status (400, 403, 503 while
	// shutting down, ...), or 0 when it ended without one (the connection
	// broke or timed out, or no valid answer came to a Dial). A Server's
	// client that sent nothing is not reported.
	Handshake(status int)

	// Opened reports that c started: just before OnOpen, or when a Shutdown
	// or Close ended it before its ReadLoop began. Each Conn reported here
	// is reported to Closed exactly once, later.
	Opened(c *Conn)

	// Closed reports that c ended, just before OnClose. code is the peer's
	// close code if a close frame arrived, else the one gust sent, else
	// 1006 (StatusAbnormalClosure); cause is one of the close causes above.
	Closed(c *Conn, code StatusCode, cause string)

	// Received reports a data message read in full, before OnMessage (a
	// streamed one after, once read to its end). payload is its size, wire
	// that of its frames' payloads as they came, compressed or not.
	Received(c *Conn, op Opcode, payload, wire int)

	// Sent reports a data message written or corked (a NextWriter's with
	// its last frame): payload is its size, wire that of its frame's payload
	// after compression. A write that fails is not reported.
	Sent(c *Conn, op Opcode, payload, wire int)

	// Queued reports n messages entering (n > 0) or leaving (n < 0) c's
	// outbox (WriteAsync, WritePreparedAsync, a heartbeat ping; its writer,
	// OutboxPolicy). One written at once is not queued. The sum of n is the
	// number of messages waiting.
	Queued(c *Conn, n int)

	// Dropped reports n messages c's full outbox refused or discarded under
	// Options.OutboxPolicy.
	Dropped(c *Conn, n int)
}

// The events of Metrics' optional Netpoll method and their Warn records,
// indexed by the kinds below.
var netpollEvents = [...]struct{ name, msg string }{
	{"fallback-fd", "gust: netpoll: connections stay in goroutine mode for life: their descriptor could not be duplicated or added to an event loop (descriptor limit?)"},
	{"fallback-type", "gust: netpoll: connections that are not plain TCP or Unix sockets (TLS gust did not make, HTTP/2, a wrapper) stay in goroutine mode"},
	{"blocked", "gust: netpoll: serving a connection held its event loop, and every connection of the loop waited: a callback that blocks?"},
	{"held", "gust: netpoll: serving a connection held its event loop, and every connection of the loop waited, though no callback ran: gust's own work (reading, TLS) or a machine too busy to run the loop"},
}

const (
	netpollFallbackFD = iota
	netpollFallbackType
	netpollBlocked
	netpollHeld
)

// netpollNotes limits the Warn records of netpoll mode's events to one a
// second per kind and config, each with the number of events since the last.
type netpollNotes struct {
	mu   sync.Mutex
	last [len(netpollEvents)]time.Time
	n    [len(netpollEvents)]int
}

// due counts an event of kind and reports whether a record is due, with
// the number of events it stands for.
func (nn *netpollNotes) due(kind int, now time.Time) (int, bool) {
	nn.mu.Lock()
	defer nn.mu.Unlock()
	nn.n[kind]++
	if !nn.last[kind].IsZero() && now.Sub(nn.last[kind]) < time.Second {
		return 0, false
	}
	n := nn.n[kind]
	nn.last[kind], nn.n[kind] = now, 0
	return n, true
}

// noteNetpoll reports a netpoll mode event on c to Metrics' Netpoll method,
// if it has one, and to the Logger at level Warn, rate limited, with attrs.
func (c *Conn) noteNetpoll(kind int, attrs ...slog.Attr) {
	ev := netpollEvents[kind]
	if m, ok := c.cfg.Metrics.(interface{ Netpoll(*Conn, string) }); ok {
		m.Netpoll(c, ev.name)
	}
	nn := c.cfg.netpollNotes
	if nn == nil {
		return
	}
	n, ok := nn.due(kind, time.Now())
	if !ok {
		return
	}
	attrs = append(attrs, c.remoteAttr(), slog.String("event", ev.name), slog.Int("count", n))
	c.cfg.logger().LogAttrs(context.Background(), slog.LevelWarn, ev.msg, attrs...)
}

// The close causes Metrics.Closed and the Debug log records report.
const (
	causePanic    = "panic"
	causeSlow     = "slow"
	causeLimit    = "limit"
	causeProtocol = "protocol"
	causePeer     = "peer"
	causeShutdown = "shutdown"
	causeLocal    = "local"
	causeTimeout  = "timeout"
	causeIO       = "io"
)

// closeCause returns the close code and cause (see Metrics) of err, the
// error OnClose receives; sent is the code gust sent, 0 for none, and
// byShutdown tells whether a shutdown or a drain of its server sent it.
func closeCause(err error, sent StatusCode, byShutdown bool) (StatusCode, string) {
	var ce *CloseError
	var pe *ProtocolError
	var pa *PanicError
	isClose := errors.As(err, &ce)
	code := StatusAbnormalClosure
	switch {
	case isClose:
		code = ce.Code
	case sent != 0:
		code = sent
	}
	switch {
	case errors.As(err, &pa):
		return code, causePanic
	case errors.Is(err, ErrSlowConsumer):
		return code, causeSlow
	case errors.As(err, &pe):
		switch {
		case pe.Code == StatusMessageTooBig:
			return code, causeLimit
		case errors.Is(pe, os.ErrDeadlineExceeded):
			return code, causeTimeout
		}
		return code, causeProtocol
	case isClose && ce.ByPeer:
		return code, causePeer
	case errors.Is(err, ErrServerClosed), byShutdown:
		return code, causeShutdown
	case isClose, errors.Is(err, errClosedNow):
		return code, causeLocal
	case errors.Is(err, os.ErrDeadlineExceeded):
		return code, causeTimeout
	}
	return code, causeIO
}

// reportClose tells Metrics and, at level Debug, the Logger how the
// connection ended; sent is the code gust sent, 0 for none.
func (c *Conn) reportClose(err error, sent StatusCode) {
	m := c.cfg.Metrics
	logger := c.cfg.logger()
	debug := logger.Enabled(context.Background(), slog.LevelDebug)
	if m == nil && !debug {
		return
	}
	code, cause := closeCause(err, sent, c.tracker != nil && c.tracker.SentByShutdown(uint16(sent)))
	if m != nil {
		m.Closed(c, code, cause)
	}
	if debug {
		logger.LogAttrs(context.Background(), slog.LevelDebug, "gust: connection closed",
			c.remoteAttr(), slog.Int("code", int(code)), slog.String("cause", cause), slog.Any("err", err),
			slog.Bool("netpoll", c.Netpoll()))
	}
}

// remoteAttr is the peer's address as a log attribute.
func (c *Conn) remoteAttr() slog.Attr {
	if a := c.RemoteAddr(); a != nil {
		return slog.String("remote", a.String())
	}
	return slog.String("remote", "")
}

// sent reports a data message written to Options.Metrics, if set.
func (c *Conn) sent(op Opcode, payload, wire int) {
	if m := c.cfg.Metrics; m != nil {
		m.Sent(c, op, payload, wire)
	}
}

// reportHandshake reports a handshake's status to Options.Metrics, if set.
func (cfg *config) reportHandshake(status int) {
	if m := cfg.Metrics; m != nil {
		m.Handshake(status)
	}
}

// upgradeStatus is the status an Upgrade ended with: see Metrics.Handshake.
func upgradeStatus(r *http.Request, c *Conn, err error) int {
	var herr *HandshakeError
	switch {
	case errors.As(err, &herr):
		return herr.Status
	case c != nil, errors.Is(err, ErrServerClosed): // made, then cut by a shutdown
		if r.ProtoMajor == 2 {
			return http.StatusOK
		}
		return http.StatusSwitchingProtocols
	}
	return 0
}

// dialStatus is the status a Dial ended with: see Metrics.Handshake.
func dialStatus(c *Conn, resp *http.Response) int {
	switch {
	case c != nil:
		return resp.StatusCode
	case resp == nil, resp.StatusCode == http.StatusSwitchingProtocols,
		resp.StatusCode >= 200 && resp.StatusCode <= 299:
		return 0 // no answer, or an acceptance that broke the protocol
	}
	return resp.StatusCode
}
