// Package load is gustload's engine: a WebSocket load generator that speaks the wire protocol
// itself (RFC 6455 client side: upgrade with a random key and a checked accept, masked frames),
// keeps a window of messages in flight per connection and verifies every echo byte for byte
// and in order.
package load

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is one load run. The zero value of every optional field is a sensible default.
type Config struct {
	// Target is host:port[/path] (tcpkali style) or ws://host:port/path.
	Target string
	// Conns is the number of connections (default 1).
	Conns int
	// Window is the number of messages in flight per connection (default 1).
	Window int
	// Rate limits the messages per second per connection; 0 means as fast as the window allows.
	// The connections' schedules are shifted by their share of one period, so that their
	// messages are spread evenly over it.
	Rate float64
	// Duration of the measured phase, after every connection is up (default 10s).
	Duration time.Duration
	// Count, when > 0, stops each connection after that many messages. With RecvOnly, the run
	// ends once every connection has received that many, and fails if one has not within
	// Duration.
	Count int64

	// Message is a fixed payload (-m, -f); when nil, Size random bytes are sent instead, with
	// a sequence number in their first 8 (binary) or 16 (text, hex) bytes.
	Message []byte
	// Size of the random payload (default 300 when Message is nil).
	Size int
	// Binary sends binary messages instead of text.
	Binary bool

	// RecvOnly connects and counts what the server sends, sending nothing.
	RecvOnly bool
	// Seq (with RecvOnly) reads a sequence number from the start of every message's payload
	// (its leading decimal digits) and fails the run unless each connection's numbers follow
	// one another by one: a message lost, repeated or out of order ends the run with an error.
	// The result reports the first and last number each connection saw.
	Seq bool
	// Idle connects, completes the handshakes, holds the connections for Duration and reports
	// the server's memory, sending nothing; with Count > 0, each connection first sends Count
	// messages and gets their echoes, and the hold starts after the last echo.
	Idle bool
	// PingAtEnd (with Idle) ends the hold with a ping on every connection: each sends one, its
	// connection number as the payload, and waits for the pong that echoes it. A connection the
	// server closed, or whose pong has not come within PingTimeout, fails the run; the result
	// counts the pongs.
	PingAtEnd bool
	// PingTimeout bounds the wait for all the pongs together (default 30s).
	PingTimeout time.Duration
	// EndHold, when set, ends the idle hold early when it receives or is closed (gustload: on
	// SIGUSR1), so that a driver running several gustloads ends every hold at the same moment.
	EndHold <-chan struct{}
	// Deflate offers permessage-deflate (RFC 7692) with context takeover both ways, compresses
	// every message sent and inflates every compressed echo before verifying it. A server that
	// declines fails the run.
	Deflate bool
	// DeflateNoContext offers server_no_context_takeover and client_no_context_takeover too
	// (implies Deflate).
	DeflateNoContext bool

	// AllowMasked accepts masked frames from the server: raw-copy and raw-buf echo the client's
	// masked frames as they are. A masked server frame is an error otherwise.
	AllowMasked bool

	// Timeout is how long an echo may take before the run fails (default 10s).
	Timeout time.Duration
	// ConnectTimeout bounds each dial plus handshake (default 10s).
	ConnectTimeout time.Duration
	// TLSX25519 offers only the X25519 key exchange over wss://, instead of crypto/tls's
	// default (the hybrid post-quantum X25519MLKEM768 first): every server then does the
	// same handshake work, whatever key exchanges its TLS supports.
	TLSX25519 bool
	// DialConcurrency is the number of handshakes in progress at once while ramping (default 64).
	DialConcurrency int
	// ConnectRate limits new connections per second while ramping; 0 means no limit.
	ConnectRate float64
	// KeepAlive is the TCP keepalive period of the connections, as net.Dialer takes it: 0 is
	// Go's default (15s), a negative value turns keepalive off.
	KeepAlive time.Duration
	// SourceAddrs is the number of loopback source addresses (127.0.0.2, .3, ...) to bind;
	// 0 picks one per 20,000 connections when Conns > 20,000 and none otherwise.
	SourceAddrs int

	// ServerPID, when > 0, is the server whose CPU time and RSS are read from /proc.
	ServerPID int
	// StatsURL, when set, is the server's /debug/stats endpoint (see cmd/echoserver): heap,
	// goroutines and allocations before and after.
	StatsURL string
	// Label is copied into the result (the bench driver puts the server's name there).
	Label string

	// Progress, when set, receives a line per second.
	Progress io.Writer
	// Seed makes the payload and masking keys reproducible when non-zero.
	Seed uint64
}

const perSourceAddr = 20000

func (c *Config) setDefaults() error {
	if c.Conns <= 0 {
		c.Conns = 1
	}
	if c.Window <= 0 {
		c.Window = 1
	}
	if c.Duration <= 0 && c.Count <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Message == nil && c.Size == 0 {
		c.Size = 300
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = 64
	}
	if c.Rate < 0 {
		return errors.New("rate < 0")
	}
	if c.RecvOnly && c.Idle {
		return errors.New("-recv-only and -idle exclude each other")
	}
	if c.Seq && !c.RecvOnly {
		return errors.New("-seq needs -recv-only")
	}
	if c.RecvOnly && c.Count > 0 && c.Duration <= 0 {
		return errors.New("-recv-only with -n needs -T: how long to wait for the messages")
	}
	if c.Idle && c.Duration <= 0 {
		return errors.New("-idle needs a duration (-T)")
	}
	if c.PingAtEnd && !c.Idle {
		return errors.New("-ping-at-end needs -idle")
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = 30 * time.Second
	}
	if c.DeflateNoContext {
		c.Deflate = true
	}
	return nil
}

// target is a parsed Target.
type target struct {
	host string // host:port
	path string // request-target, at least "/"
	ip   net.IP // the host's IP when it is a literal
	tls  bool   // wss://: TLS, without checking the server's certificate
}

func parseTarget(s string) (target, error) {
	if s == "" {
		return target{}, errors.New("no target (host:port[/path], ws://host:port/path or wss://host:port/path)")
	}
	if !strings.HasPrefix(s, "ws://") && !strings.HasPrefix(s, "wss://") {
		s = "ws://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return target{}, fmt.Errorf("target: %w", err)
	}
	secure := u.Scheme == "wss"
	if u.Port() == "" {
		port := "80"
		if secure {
			port = "443"
		}
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	t := target{host: u.Host, path: u.RequestURI(), tls: secure}
	if t.path == "" {
		t.path = "/"
	}
	t.ip = net.ParseIP(u.Hostname())
	return t, nil
}

// sourceAddrs returns the local addresses to bind, nil for "let the kernel pick".
func (c *Config) sourceAddrs(t target) ([]net.IP, error) {
	n := c.SourceAddrs
	if n == 0 && c.Conns > perSourceAddr {
		n = (c.Conns + perSourceAddr - 1) / perSourceAddr
	}
	if n == 0 {
		return nil, nil
	}
	if t.ip == nil || !t.ip.IsLoopback() || t.ip.To4() == nil {
		return nil, fmt.Errorf("several source addresses need an IPv4 loopback target, not %s", t.host)
	}
	if n > 250 {
		return nil, fmt.Errorf("%d source addresses are too many", n)
	}
	ips := make([]net.IP, n)
	for i := range ips {
		ips[i] = net.IPv4(127, 0, 0, byte(2+i))
	}
	return ips, nil
}
