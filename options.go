package gust

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/wheel"
)

// Options configures a connection, whichever side made it: an [Upgrader]
// or a [Server] (Upgrader.Options) or [Dial] (DialOptions.Options). What
// only a server's handshake needs is on the Upgrader and the Server; what
// only dialing needs is on DialOptions. The zero value is valid: every
// field documents the default it stands for.
type Options struct {
	// ReadBufferSize is the size of the buffer a connection reads into while
	// bytes are arriving. Default 64 KiB. Memory: one buffer per connection
	// that is reading, taken from a shared pool; an idle connection holds
	// none. Connections that cannot wait without a buffer (TLS, HTTP/2
	// streams, other net.Conn types) keep one of at most 8 KiB.
	ReadBufferSize int

	// WriteBufferSize is the size past which corked writes are flushed even
	// while the read goroutine still has bytes to dispatch, and below which a
	// frame's header and payload are copied into one buffer rather than sent
	// with writev; it also bounds the fragments of a NextWriter (header
	// included). Default 64 KiB. Memory: held only while writes are corked,
	// and by each open NextWriter.
	WriteBufferSize int

	// MaxMessageSize is the largest message, in bytes, a peer may send; a
	// bigger one fails the connection with 1009 (message too big) as soon as
	// a frame header announces it. Default 16 MiB. Negative means no limit.
	MaxMessageSize int64

	// MessageTimeout bounds how long a message may take to arrive, from the
	// first time gust waits for the rest of it (or of its first frame) to
	// its last byte. A peer that takes longer, such as one that announces a
	// large frame and sends it a byte at a time, fails the connection with
	// 1008 (policy violation), and OnClose receives an error for which
	// errors.Is(err, os.ErrDeadlineExceeded) holds. Default 90s, in which a
	// message of the default MaxMessageSize arrives at 190 KB/s or faster:
	// raise it with MaxMessageSize for slow links. Negative turns the bound
	// off. (A message in more than 1,024 empty frames fails with 1008 too.)
	MessageTimeout time.Duration

	// StreamThreshold, when positive, delivers a message larger than
	// StreamThreshold bytes to OnMessage as a stream (Message.Streamed):
	// once it has outgrown that many bytes, or at once when its first frame
	// announces more, counted as they come on the wire (compressed, for a
	// compressed message; one small on the wire is streamed once it
	// inflates past the threshold). The handler reads it with
	// Message.Read, on the read goroutine even with Parallel set, and only
	// until OnMessage returns: gust reads and discards what it left. The
	// bytes buffered before the message was streamed (at most
	// StreamThreshold) are read first. MaxMessageSize and the UTF-8 check
	// still apply, as Read goes. Default 0: every message is delivered
	// whole, in Data. Memory: a streamed message holds at most
	// StreamThreshold bytes besides the read buffer (and, compressed, an
	// inflater of about 40 KiB and its window), whatever its size.
	StreamThreshold int

	// SkipUTF8Validation turns off the UTF-8 check of text messages and
	// close reasons that RFC 6455 requires. Default false: text is checked,
	// and invalid text fails the connection with 1007 as soon as the first
	// invalid byte arrives.
	SkipUTF8Validation bool

	// Parallel, when positive, moves OnMessage calls off the read
	// goroutine, onto at most Parallel short-lived goroutines per
	// connection; messages may then be handled out of order, and writes are
	// not corked. Default 0: OnMessage runs on the read goroutine, in order.
	Parallel int

	// OutboxSize bounds the messages WriteAsync and WritePreparedAsync may
	// hold per connection besides the batch being written (at most as many
	// again). Default 256. Memory: the outbox holds references, not
	// payloads (those stay the caller's, or the PreparedMessage's that every
	// receiver shares), 48 bytes a message, in arrays of 16 or 64 entries
	// that a connection borrows from pools shared by all while it has
	// messages queued (a longer burst grows its own); an idle connection
	// holds none.
	OutboxSize int

	// OutboxPolicy is what happens to a message queued while the outbox
	// holds OutboxSize: refused with ErrQueueFull (OutboxReject, the
	// default), the oldest or the new one dropped, or the connection closed
	// with 1008 as a slow consumer (OutboxCloseSlow: a peer that does not
	// read again within CloseTimeout is cut without the close frame). Values
	// other than the four constants mean OutboxReject.
	OutboxPolicy OutboxPolicy

	// CloseTimeout bounds the wait for the peer's answer to a close frame
	// gust sent, before the TCP connection is closed anyway. Default 5s.
	// After gust failed the connection (a protocol error, a limit), the
	// wait is shorter: see [Conn.ReadLoop].
	CloseTimeout time.Duration

	// WriteTimeout bounds how long a write may make no progress: every
	// write gust makes to the socket (messages, corked batches, the outbox's
	// writer, pings, close frames) fails once the peer has taken no
	// bytes for that long, and the connection ends; OnClose then receives
	// an error for which errors.Is(err, os.ErrDeadlineExceeded) holds. A
	// large message written in pieces gets the full timeout for each piece.
	// A deadline set with SetWriteDeadline or SetDeadline applies as well,
	// whichever comes first. Default 10s; negative turns the bound off
	// (a peer that never reads then holds its connection, goroutine and
	// buffers for as long as it stays connected).
	WriteTimeout time.Duration

	// PingInterval turns heartbeats on: a connection on which no frame has
	// arrived for PingInterval (data, ping, pong or close: any frame counts
	// as alive) is sent a ping with an empty payload, and cut if still
	// nothing has arrived PingTimeout after it. A silent peer is thus cut
	// PingInterval + PingTimeout after its last frame, give or take the
	// timers' granularity (a quarter of the shorter of the two). Time spent
	// in a callback, while the read goroutine does not read, never counts
	// as silence; nor does the time after a close frame was sent, which
	// CloseTimeout bounds. The cut sends no close frame, as CloseNow: a peer
	// that answers no ping would not answer a close handshake either. The
	// peer sees the TCP connection end (1006), and OnClose receives an error
	// that says "no frame from the peer for ..." and for which
	// errors.Is(err, os.ErrDeadlineExceeded) holds. The pong to gust's ping
	// reaches OnPong like any other. Default 0: off, and nothing runs.
	// Cost: timers shared by all connections (one goroutine per distinct
	// setting while connections use it), no goroutine or timer per
	// connection; 48 bytes per connection; each read stores a counter twice
	// (atomically, no lock). A slow peer never holds up the others' pings.
	PingInterval time.Duration

	// PingTimeout is how long a connection sent a heartbeat ping may stay
	// silent before it is cut (see PingInterval). Default: PingInterval.
	// Ignored unless PingInterval is set.
	PingTimeout time.Duration

	// DisableRecovery lets a panic in an Event callback crash the process.
	// Default false: the panic is recovered, logged to Logger with its
	// stack, and the connection closed with 1011 (internal error).
	DisableRecovery bool

	// Logger receives structured records: recovered panics and a Server's
	// accept errors at level Error, and, at level Debug, one record per
	// connection that ends. The details are attributes, not text:
	// "remote" (the peer's address), "code" (the close code), "cause"
	// (one of the causes listed on [Metrics]), "err", and for a panic
	// "panic" (the value) and "stack". Default: slog.Default(), as it is
	// when the record is made. Cost: none per message; a connection that
	// ends asks the handler once whether Debug is enabled.
	Logger *slog.Logger

	// Metrics, when set, receives every connection's events: handshakes,
	// opens and closes with their code and cause, data messages and their
	// bytes both ways, and the outbox's queue (see [Metrics]). The package
	// github.com/gustws/gust/metrics has one with counters for expvar.
	// Default nil: off, at the cost of one nil check per event. Its
	// methods are called synchronously and must not block.
	Metrics Metrics

	// Netpoll turns on netpoll mode (Linux; elsewhere it is ignored): a
	// connection with nothing to read holds no goroutine and no buffer,
	// only its Conn and its socket (about 0.4 KiB), parked on one of
	// gust's event loops (one per GOMAXPROCS), which reads, parses and
	// calls the callbacks when bytes arrive. Two things change for the
	// application. ReadLoop returns as soon as the connection is first
	// idle, so the net/http handler returns while the WebSocket lives on:
	// what must follow the connection goes in OnClose (see
	// [Conn.ReadLoop]). The callbacks run on a loop shared with other
	// connections, so they must not block (hand slow work to a goroutine
	// of your own, or set Parallel; Ping fails there at once); gust's own
	// waits go to a goroutine started for the connection. TLS, HTTP/2
	// streams, wrapped conns and a connection whose descriptor cannot be
	// duplicated stay in goroutine mode (counted by Metrics, logged at
	// Warn); [Conn.Netpoll] tells which mode serves a connection.
	// Default false: goroutine mode, one goroutine per connection. Choose
	// netpoll mode for many mostly idle connections; README's "Netpoll
	// mode" has the details and the figures for both.
	Netpoll bool

	// Compression configures permessage-deflate (RFC 7692). Default: off.
	Compression CompressionOptions
}

// Defaults for the Options fields.
const (
	defaultReadBufferSize   = 64 << 10
	defaultWriteBufferSize  = 64 << 10
	defaultMaxMessageSize   = 16 << 20
	defaultOutboxSize       = 256
	defaultCloseTimeout     = 5 * time.Second
	defaultWriteTimeout     = 10 * time.Second
	defaultMessageTimeout   = 90 * time.Second
	defaultHandshakeTimeout = 10 * time.Second
	defaultMaxHeaderBytes   = 16 << 10
)

// config is Options with the defaults filled in, with what a server's
// handshake or a dial needs besides, shared by every connection an
// Upgrader, a Server or a dial makes.
type config struct {
	Options
	deflate deflate.Config // Compression, from this side

	// heartbeats, when PingInterval is set
	wheel            *hbWheel // nil when off
	pingTicks        uint64   // PingInterval in the wheel's ticks
	pingTimeoutTicks uint64   // PingTimeout in the wheel's ticks

	// the handshake
	Subprotocols     []string // offered (client) or supported (server), in order of preference
	ResponseHeader   http.Header
	CheckOrigin      func(r *http.Request) bool
	OnRequest        func(r *http.Request, h http.Header, c *Conn) error
	HandshakeTimeout time.Duration
	MaxHeaderBytes   int
	TLSConfig        *tls.Config

	netpollNotes *netpollNotes // rate-limits netpoll mode's Warn records; nil unless Netpoll
}

// newConfig fills in the defaults of o for connections on the server
// (server true) or the client side.
func newConfig(o Options, server bool) *config {
	c := &config{Options: o}
	if o.Netpoll {
		c.netpollNotes = new(netpollNotes)
	}
	if c.ReadBufferSize <= 0 {
		c.ReadBufferSize = defaultReadBufferSize
	}
	if c.WriteBufferSize <= 0 {
		c.WriteBufferSize = defaultWriteBufferSize
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = defaultMaxMessageSize
	}
	if c.Parallel < 0 {
		c.Parallel = 0
	}
	if c.OutboxSize <= 0 {
		c.OutboxSize = defaultOutboxSize
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = defaultCloseTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = defaultWriteTimeout
	}
	if c.MessageTimeout == 0 {
		c.MessageTimeout = defaultMessageTimeout
	}
	if c.PingInterval > 0 {
		if c.PingTimeout <= 0 {
			c.PingTimeout = c.PingInterval
		}
		c.wheel = wheel.For[heartbeat](wheelTick(c.PingInterval, c.PingTimeout))
		c.pingTicks = c.wheel.Ticks(c.PingInterval)
		c.pingTimeoutTicks = c.wheel.Ticks(c.PingTimeout)
	} else {
		c.PingInterval, c.PingTimeout = 0, 0
	}
	c.deflate = c.Compression.rfc(server)
	c.HandshakeTimeout = defaultHandshakeTimeout
	c.MaxHeaderBytes = defaultMaxHeaderBytes
	return c
}

// logger returns Options.Logger, or slog.Default() when it is nil.
func (c *config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// withHandshake sets the handshake's timeout and head limit, where given.
func (c *config) withHandshake(timeout time.Duration, maxHeaderBytes int) *config {
	if timeout > 0 {
		c.HandshakeTimeout = timeout
	}
	if maxHeaderBytes > 0 {
		c.MaxHeaderBytes = maxHeaderBytes
	}
	return c
}
