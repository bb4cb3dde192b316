package gust

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// Metrics receives what happens on connections, for counters and gauges:
// handshakes, connections opening and closing (with the code and the cause),
// data messages and their bytes in each direction, and the outboxes' queues.
// Set one in Options.Metrics; it then applies to every connection those
// Options make, through an [Upgrader], a [Server] or [Dial]. The package
// github.com/gustws/gust/metrics implements it with atomic counters that
// expvar can publish, and the module github.com/gustws/gust/metrics/prometheus
// with Prometheus metrics.
//
// The methods are called synchronously, on the goroutine where the event
// happens (the read goroutine, a writer, the goroutine that called Dial, a
// handshake's), from many connections at once: an implementation must be
// safe for concurrent use, fast, and must not block, since a connection
// waits for it; it must not panic either (gust does not recover from the
// hook's panics). Sent, Queued and Dropped may be called while the Conn
// holds a lock of its writes or of its outbox: they must not write to c,
// queue on it or Close it (CloseNow is fine), which would deadlock. Keep per-connection
// state, if any, with [Conn.Set].
//
// Cost: with Options.Metrics nil, one nil check per event and nothing else;
// with a Metrics set, one interface call per event, and no allocation by
// gust for it.
//
// # Close causes
//
// Closed's cause is one of a fixed set of strings, meant for a label of low
// cardinality. It is classified from the error OnClose receives, in this
// order:
//
//   - "panic": a callback panicked ([*PanicError]); gust sent 1011.
//   - "slow": the outbox overflowed under OutboxCloseSlow
//     ([ErrSlowConsumer]); gust sent 1008.
//   - "limit": the peer went past a limit: a message over
//     Options.MaxMessageSize, compressed or not (a [*ProtocolError] with
//     1009).
//   - "protocol": the peer broke the protocol (any other *ProtocolError:
//     1002, 1007).
//   - "peer": the peer started the closing handshake ([*CloseError] with
//     ByPeer).
//   - "shutdown": the Server's or Upgrader's Shutdown or Close ended it:
//     cut ([ErrServerClosed]), or ended after Shutdown's close frame with
//     1001, whether the peer answered it or not.
//   - "local": this side closed: [Conn.Close] answered by the peer (a
//     *CloseError without ByPeer), or [Conn.CloseNow].
//   - "timeout": a deadline passed: Options.WriteTimeout, heartbeats
//     (Options.PingInterval) gone unanswered, a read deadline,
//     Options.MessageTimeout (gust sent 1008), or
//     Options.CloseTimeout while waiting for the answer to a close frame.
//   - "io": anything else: the peer left without a close frame (EOF), a
//     reset, another network error.
//
// # Netpoll mode
//
// A Metrics may also have a method
//
//	Netpoll(c *Conn, event string)
//
// which gust finds by a type assertion, so that an implementation without
// it still compiles; it is called, under the rules above, for what
// happens to connections in netpoll mode (Options.Netpoll) that a user
// must know of. event is one of:
//
//   - "fallback-fd": c stays in goroutine mode for its whole life because
//     its descriptor could not be duplicated or added to an event loop:
//     most often the process's descriptor limit (EMFILE).
//   - "fallback-type": c stays in goroutine mode because it is not a plain
//     TCP or Unix socket (TLS, an HTTP/2 stream, a wrapped net.Conn).
//   - "blocked": serving c held its event loop for more than 100 ms (a
//     callback that blocks): every other connection of the loop waited.
//
// Each event is also logged at level Warn (Options.Logger), at most once a
// second for each kind and Options, with the number of events since the
// last record. The packages named above count them.
type Metrics interface {
	// Handshake reports the outcome of a handshake with the HTTP status it
	// ended with. On the server (Upgrader, Server): 101 for a connection
	// accepted (200 for a WebSocket over HTTP/2), or the status the request
	// was refused with (400, 403 for an origin refused, 405, 426, 431,
	// 503 while shutting down, ...); 0 when it failed without a status:
	// the connection broke or timed out (a Server's client that sent part
	// of a request and went silent; one that sent nothing is not reported)
	// or could not be taken over. On the client, once per Dial: 101 (or
	// 200) when it returned a Conn, the status the server refused with, or
	// 0 when no valid answer came (connect, proxy or TLS failure, a
	// timeout, a 101 that broke the protocol). An accepted handshake is
	// followed by Opened once the connection starts.
	Handshake(status int)

	// Opened reports that c started: its ReadLoop began (just before
	// OnOpen), or a Shutdown or Close ended it before its ReadLoop did.
	// Every Conn reported here is reported to Closed exactly once, later;
	// the difference is the number of live connections.
	Opened(c *Conn)

	// Closed reports that c ended, just before OnClose. code is the code of
	// the peer's close frame if one arrived, else the code gust sent if it
	// sent one, else 1006 (StatusAbnormalClosure: no close frame). cause
	// is one of the strings listed under "Close causes".
	Closed(c *Conn, code StatusCode, cause string)

	// Received reports a data message read in full, before OnMessage (also
	// for a message dropped because a close frame was sent); a streamed
	// one (Options.StreamThreshold), once it has been read to its end,
	// after OnMessage. payload is its size, wire the size of its frames'
	// payloads as they came, compressed or not (frame headers not counted).
	Received(c *Conn, op Opcode, payload, wire int)

	// Sent reports a data message written, or corked to be written with
	// others (WriteMessage, WriteString, WriteJSON, WriteUncompressed,
	// WritePrepared, the messages the outbox writes, and a NextWriter's or
	// WriteFrom's message once its last frame is): payload is its
	// size, wire the size of its frame's payload after compression (frame
	// headers not counted). A write that fails is not reported: the
	// connection ends.
	Sent(c *Conn, op Opcode, payload, wire int)

	// Queued reports that n messages entered (n > 0) or left (n < 0) c's
	// outbox: queued by WriteAsync or WritePreparedAsync (or a heartbeat's
	// ping that could not be written at once), taken by its writer
	// goroutine, or discarded by Options.OutboxPolicy. A message that
	// WriteAsync writes at once, the outbox being empty, is not queued. The
	// sum of n over all calls is the number of messages waiting in
	// outboxes.
	Queued(c *Conn, n int)

	// Dropped reports n messages that c's outbox refused or discarded
	// when full (Options.OutboxPolicy): the one OutboxReject refused
	// (WriteAsync returned ErrQueueFull), the one OutboxDropOldest or
	// OutboxDropNewest discarded, the queue and the new message that
	// OutboxCloseSlow discarded.
	Dropped(c *Conn, n int)
}

// The events of the optional Netpoll method of Metrics; their order is
// netpollNotes' index.
var netpollEvents = [...]string{"fallback-fd", "fallback-type", "blocked"}

const (
	netpollFallbackFD = iota
	netpollFallbackType
	netpollBlocked
)

// netpollNotes keeps the Warn records of netpoll mode's events to one a
// second for each kind, for each config: a storm of connections at the
// descriptor limit logs a record a second, each with the number of events
// since the last, not one per connection.
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

// noteNetpoll reports an event of netpoll mode on c to Options.Metrics, if
// it has the Netpoll method, and to Options.Logger at level Warn, rate
// limited (netpollNotes).
func (c *Conn) noteNetpoll(kind int, msg string, attrs ...slog.Attr) {
	if m, ok := c.cfg.Metrics.(interface{ Netpoll(*Conn, string) }); ok {
		m.Netpoll(c, netpollEvents[kind])
	}
	nn := c.cfg.netpollNotes
	if nn == nil {
		return
	}
	n, ok := nn.due(kind, time.Now())
	if !ok {
		return
	}
	attrs = append(attrs, c.remoteAttr(), slog.String("event", netpollEvents[kind]), slog.Int("count", n))
	c.cfg.logger().LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// noteFallback reports that c, which Options.Netpoll asked to serve on an
// event loop, stays in goroutine mode: kind is netpollFallbackFD (err is
// why) or netpollFallbackType.
func (c *Conn) noteFallback(kind int, err error) {
	if kind == netpollFallbackType {
		c.noteNetpoll(kind, "gust: netpoll: connections that are not plain TCP or Unix sockets (TLS, HTTP/2, a wrapper) stay in goroutine mode",
			slog.String("type", fmt.Sprintf("%T", c.conn)))
		return
	}
	c.noteNetpoll(kind, "gust: netpoll: connections stay in goroutine mode for life: their descriptor could not be duplicated or added to an event loop (descriptor limit?)",
		slog.Any("err", err))
}

// noteLoopHeld reports that serving c held its event loop for d, past
// netpoll.HeldThreshold.
func (c *Conn) noteLoopHeld(d time.Duration) {
	c.noteNetpoll(netpollBlocked, "gust: netpoll: serving a connection held its event loop, and every connection of the loop waited: a callback that blocks?",
		slog.Duration("held", d))
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

// closeCause classifies err, the error OnClose receives, given the code of
// the close frame gust sent (0 for none): see Metrics.
func (c *Conn) closeCause(err error, sent StatusCode) (StatusCode, string) {
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
	case errors.Is(err, ErrServerClosed),
		sent == StatusGoingAway && c.tracker != nil && c.tracker.closing.Load():
		return code, causeShutdown
	case isClose, errors.Is(err, errClosedNow):
		return code, causeLocal
	case errors.Is(err, os.ErrDeadlineExceeded):
		return code, causeTimeout
	}
	return code, causeIO
}

// reportClose tells Options.Metrics and, at level Debug, Options.Logger
// how the connection ended; sent is the code of the close frame gust sent,
// 0 for none.
func (c *Conn) reportClose(err error, sent StatusCode) {
	m := c.cfg.Metrics
	logger := c.cfg.logger()
	debug := logger.Enabled(context.Background(), slog.LevelDebug)
	if m == nil && !debug {
		return
	}
	code, cause := c.closeCause(err, sent)
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

// framePayloadLen is the length of the payload of f, a complete frame
// that putHeader encoded, unmasked.
func framePayloadLen(f []byte) int {
	switch f[1] & 0x7f {
	case 126:
		return len(f) - 4
	case 127:
		return len(f) - 10
	}
	return len(f) - 2
}
