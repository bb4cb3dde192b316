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
// only a server's handshake needs is on the Upgrader and the Server, what
// only dialing needs on DialOptions. The zero value is valid: each field
// states the default it stands for.
type Options struct {
	// ReadBufferSize is the size of the buffer a connection reads into.
	// Default 64 KiB. Memory: taken from a shared pool while bytes arrive;
	// an idle connection holds none, except one that cannot wait without it
	// (TLS, HTTP/2 streams, other net.Conn types): at most 8 KiB.
	ReadBufferSize int

	// WriteBufferSize is the size past which corked writes are flushed
	// before the read goroutine is done dispatching, and below which a
	// frame's header and payload are copied into one buffer rather than
	// sent with writev; it also bounds a NextWriter's fragments (header
	// included). Default 64 KiB. Memory: held only while writes are corked,
	// and by each open NextWriter.
	WriteBufferSize int

	// MaxMessageSize is the largest message, in bytes, a peer may send, as
	// OnMessage gets it (inflated, when compressed); a bigger one fails the
	// connection with 1009 (message too big) as soon as a frame header
	// announces it, or, compressed, as soon as it inflates past it. A
	// compressed message may take a little more on the wire, since bytes that
	// do not compress grow: at most MaxMessageSize plus an eighth plus 256
	// bytes. Default 16 MiB. Negative means no limit.
	MaxMessageSize int64

	// MessageTimeout bounds how long a message may take to arrive, from the
	// first wait for its rest; a slower one (or one in more than 1,024 empty
	// frames) fails the connection with 1008, and OnClose's error wraps
	// os.ErrDeadlineExceeded. Default 90s, in which 16 MiB arrive at
	// 190 KB/s: raise it with MaxMessageSize. Negative turns it off.
	// It bounds a TLS record that has begun the same way, on the TLS gust
	// makes ([Server.ServeTLS], wss:// Dials): crypto/tls holds a record's
	// bytes (up to 17 KiB) until it is whole, whatever the frames inside.
	// TLS made elsewhere (net/http's) hides its records from gust: there
	// PingInterval ends a peer that stops inside one.
	MessageTimeout time.Duration

	// StreamThreshold, when positive, hands a message larger than this many
	// bytes (on the wire, or inflated) to OnMessage as a stream, read with
	// Message.Read, as soon as it outgrows it or a frame announces more.
	// Default 0: every message whole, in Data. Memory: a streamed message
	// holds at most StreamThreshold bytes besides the read buffer (and,
	// compressed, an inflater of about 40 KiB), whatever its size.
	StreamThreshold int

	// SkipUTF8Validation turns off the UTF-8 check of text messages and
	// close reasons that RFC 6455 requires. Default false: invalid text
	// fails the connection with 1007 as soon as the first bad byte arrives.
	SkipUTF8Validation bool

	// Parallel, when positive, moves OnMessage calls off the read goroutine
	// onto at most Parallel short-lived goroutines per connection; messages
	// may then be handled out of order, and writes are not corked. Default
	// 0: OnMessage runs on the read goroutine, in order.
	Parallel int

	// OutboxSize bounds the messages WriteAsync and WritePreparedAsync may
	// hold per connection besides the batch being written (at most as many
	// again). Default 256. Memory: 48 bytes a message (references, not
	// payloads), in arrays borrowed from shared pools while messages wait;
	// an idle connection holds none. On a server's socket the kernel keeps
	// little beyond it (64 KiB not yet sent, on Linux, or the largest
	// write), so size the outbox for the longest pause a reader is
	// forgiven: at 1,000 messages a second, 256 is about a quarter second.
	OutboxSize int

	// OutboxPolicy says what happens to a message queued on a full outbox:
	// refused with ErrQueueFull (OutboxReject, the default, also for unknown
	// values), the oldest or the new one dropped, or the connection closed
	// with 1008 as a slow consumer (OutboxCloseSlow).
	OutboxPolicy OutboxPolicy

	// CloseTimeout bounds the wait for the peer's answer to a close frame
	// gust sent, before the TCP connection is closed anyway. Default 5s.
	// After gust failed the connection the wait is shorter: see
	// [Conn.ReadLoop].
	CloseTimeout time.Duration

	// WriteTimeout bounds how long any write to the socket may make no
	// progress; then the connection ends, and OnClose's error wraps
	// os.ErrDeadlineExceeded. A deadline from SetWriteDeadline applies as
	// well. Default 10s; negative turns it off, and a peer that never reads
	// then holds its connection as long as it stays connected.
	WriteTimeout time.Duration

	// PingInterval turns heartbeats on: a connection on which no frame has
	// arrived for PingInterval is sent an empty ping, and cut without a
	// close frame if nothing arrives within PingTimeout (give or take a
	// quarter of the shorter); OnClose's error then wraps
	// os.ErrDeadlineExceeded. Time in a callback never counts as silence.
	// Default 0: off. Cost: timers shared by all connections, 48 bytes per
	// connection, two atomic stores per read.
	PingInterval time.Duration

	// PingTimeout is how long a connection sent a heartbeat ping may stay
	// silent before it is cut (see PingInterval). Default: PingInterval.
	PingTimeout time.Duration

	// DisableRecovery lets a panic in an Event callback crash the process.
	// Default false: the panic is recovered, logged with its stack, and the
	// connection closed with 1011 (internal error).
	DisableRecovery bool

	// Logger receives structured records: recovered panics and a Server's
	// accept errors at level Error, and one record per connection that ends
	// at level Debug, with details as attributes ("remote", "code", "cause"
	// as on [Metrics], "err", "panic", "stack"). Default: slog.Default(), as
	// it is when the record is made.
	Logger *slog.Logger

	// Metrics, when set, receives every connection's events (see
	// [Metrics]), synchronously. Default nil: off, one nil check per event.
	Metrics Metrics

	// Netpoll turns on netpoll mode (Linux; ignored elsewhere): an idle
	// connection holds no goroutine and no buffer (about 0.4 KiB in all),
	// parked on one of gust's event loops. ReadLoop returns at its first
	// idle moment, so its end belongs in OnClose (see [Conn.ReadLoop]), and
	// the callbacks run on a shared loop, so they must not block. TLS goes
	// to the loops when gust makes it ([Server.ServeTLS], wss:// Dials);
	// other TLS (net/http's), HTTP/2 streams and wrapped conns stay in
	// goroutine mode ([Conn.Netpoll] tells). Default false. See
	// docs/netpoll.md.
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
	setIf(c.ReadBufferSize <= 0, &c.ReadBufferSize, defaultReadBufferSize)
	setIf(c.WriteBufferSize <= 0, &c.WriteBufferSize, defaultWriteBufferSize)
	setIf(c.MaxMessageSize == 0, &c.MaxMessageSize, defaultMaxMessageSize)
	setIf(c.Parallel < 0, &c.Parallel, 0)
	setIf(c.OutboxSize <= 0, &c.OutboxSize, defaultOutboxSize)
	setIf(c.CloseTimeout <= 0, &c.CloseTimeout, defaultCloseTimeout)
	setIf(c.WriteTimeout == 0, &c.WriteTimeout, defaultWriteTimeout)
	setIf(c.MessageTimeout == 0, &c.MessageTimeout, defaultMessageTimeout)
	if c.PingInterval > 0 {
		setIf(c.PingTimeout <= 0, &c.PingTimeout, c.PingInterval)
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

// setIf sets *field to v when cond holds, such as a field left at zero.
func setIf[T any](cond bool, field *T, v T) {
	if cond {
		*field = v
	}
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
	setIf(timeout > 0, &c.HandshakeTimeout, timeout)
	setIf(maxHeaderBytes > 0, &c.MaxHeaderBytes, maxHeaderBytes)
	return c
}
