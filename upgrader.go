package gust

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/h2conn"
	"github.com/gustws/gust/internal/handshake"
)

// Upgrader turns net/http requests into WebSocket connections. Its zero
// value is ready to use: connections then report to a BuiltinEventHandler
// and take the default Options. Set the fields before the first Upgrade and
// do not change them afterwards; an Upgrader is safe for concurrent use
// from then on, and must not be copied.
type Upgrader struct {
	// Handler receives the events of every connection. Default: a
	// BuiltinEventHandler, which answers pings and drops messages.
	Handler Event

	// Options configures the connections.
	Options Options

	// Subprotocols lists the subprotocols the server supports, in order of
	// preference; the first one the client also offers is selected
	// (Conn.Subprotocol). Default none: no Sec-WebSocket-Protocol.
	Subprotocols []string

	// ResponseHeader is added to every handshake response (101, or 200
	// over HTTP/2), for example Set-Cookie; per request, OnRequest adds
	// fields of its own. Default none. The rules of OnRequest's h apply:
	// the handshake's own fields are skipped, and one that would corrupt
	// the response makes every handshake answer 500.
	ResponseHeader http.Header

	// CheckOrigin decides whether to accept a handshake, from the request's
	// Origin; a false answer refuses it with 403. Default: accept requests
	// without an Origin header (non-browser clients) and requests whose
	// Origin host equals the Host header (same-origin browsers).
	CheckOrigin func(r *http.Request) bool

	// OnRequest, if set, is called for every handshake request that passed
	// the protocol's checks and CheckOrigin, before any answer is written
	// and before OnOpen, in the handshake's goroutine (on a Server, within
	// HandshakeTimeout). It may read r (gust keeps none of it afterwards),
	// add response fields to h (a Sec-WebSocket-Protocol there chooses the
	// subprotocol) and store data on c with c.Set for OnOpen and later
	// callbacks; c has no network connection yet. A nil error accepts; an
	// error refuses and no Conn is made: with the Status, Header and Body of
	// a [*HandshakeError] in its chain, else with 403 and no body. Default
	// nil: every request that passed the checks is accepted.
	// docs/handshake.md has the details; see ExampleUpgrader_onRequest.
	OnRequest func(r *http.Request, h http.Header, c *Conn) error

	// HandshakeTimeout bounds the time the 101 response, or a refusal
	// OnRequest chose, may take to write, and on a Server the time a
	// client has to send its whole request after connecting. Default 10s.
	HandshakeTimeout time.Duration

	once  sync.Once
	cfg   *config
	track tracker // the connections Upgrade made, for Shutdown and Close
}

// config returns the Upgrader's settings with the defaults filled in,
// made on first use.
func (u *Upgrader) config() *config {
	u.once.Do(func() { u.cfg = u.newConfig(0, nil) })
	return u.cfg
}

// newConfig makes the settings of an Upgrader, or of a Server with its
// own head limit and TLS configuration.
func (u *Upgrader) newConfig(maxHeaderBytes int, tlsConfig *tls.Config) *config {
	cfg := newConfig(u.Options, true).withHandshake(u.HandshakeTimeout, maxHeaderBytes)
	cfg.Subprotocols = u.Subprotocols
	cfg.ResponseHeader = u.ResponseHeader
	cfg.CheckOrigin = u.CheckOrigin
	cfg.OnRequest = u.OnRequest
	cfg.TLSConfig = tlsConfig
	return cfg
}

// handler returns Handler, or a BuiltinEventHandler when it is nil.
func (u *Upgrader) handler() Event {
	if u.Handler == nil {
		return BuiltinEventHandler{}
	}
	return u.Handler
}

// Upgrade checks the handshake request, answers it and returns the
// connection; the caller then runs its ReadLoop. When the request is not an
// acceptable WebSocket handshake, Upgrade answers with the HTTP status RFC
// 6455 names (400, 403 for a refused origin, 405 for a method other than
// GET, 426 with Sec-WebSocket-Version: 13 for another version) and a short
// body, and returns a *HandshakeError. OnRequest, if set, sees the requests
// that passed these checks, and may refuse them with a response of its
// own.
//
// Header fields set on w before Upgrade (a cookie set by the handler or a
// middleware) go into the handshake response, as into any response, with
// ResponseHeader's and OnRequest's after them; they go into a refusal
// too.
//
// Upgrade hijacks the connection through http.NewResponseController, so
// middleware that wraps the ResponseWriter works if it has an Unwrap method.
// Bytes the client sent after the request and net/http already buffered are
// kept.
//
// Upgrade also answers WebSockets over HTTP/2 (RFC 8441): an extended
// CONNECT request with :protocol websocket becomes a Conn on that stream,
// which then behaves as any other. The handler must not return before the
// Conn ends, since returning ends the stream: run ReadLoop in the handler.
// Go's HTTP/2 server offers extended CONNECT only when the process starts
// with GODEBUG=http2xconnect=1 (see examples/h2).
//
// The Upgrader keeps the connections it made until they end, for Shutdown,
// Drain and Close. Once one has started, Upgrade answers 503 Service
// Unavailable (with Retry-After: 1 during a drain) and returns a
// *HandshakeError wrapping ErrServerClosed.
func (u *Upgrader) Upgrade(w http.ResponseWriter, r *http.Request) (c *Conn, err error) {
	if m := u.config().Metrics; m != nil {
		defer func() { m.Handshake(upgradeStatus(r, c, err)) }()
	}
	if u.track.Draining() {
		return nil, refuseDraining(w)
	}
	if !u.track.Begin() {
		return nil, refuseShuttingDown(w)
	}
	made := false
	defer func() {
		if !made { // refused, failed, or OnRequest panicked with DisableRecovery set
			u.track.End()
		}
	}()
	c, err = u.upgrade(w, r)
	if err != nil {
		return nil, err
	}
	made = true
	c.tracker = &u.track // before Add, which may cut c: c's end forgets it from there
	if !u.track.Add(c) {
		return nil, fmt.Errorf("gust: upgrade: %w", ErrServerClosed)
	}
	return c, nil
}

// upgrade is Upgrade without the tracking.
func (u *Upgrader) upgrade(w http.ResponseWriter, r *http.Request) (*Conn, error) {
	cfg := u.config()
	hs, herr := cfg.checkRequest(r)
	if herr != nil {
		if herr.Status == http.StatusUpgradeRequired {
			w.Header().Set("Sec-WebSocket-Version", "13")
		}
		if herr.Status == http.StatusMethodNotAllowed {
			if r.ProtoMajor == 2 {
				w.Header().Set("Allow", http.MethodConnect)
			} else {
				w.Header().Set("Allow", http.MethodGet)
			}
		}
		http.Error(w, string(herr.Body), herr.Status)
		return nil, herr
	}
	// Over HTTP/1.1 the fields set on w go into the 101 written below, as
	// they would into any response; over HTTP/2 w's header is the
	// response's already.
	c, extra, herr := cfg.accept(r, &hs, u.handler(), w.Header())
	if herr != nil {
		respondRefusal(w, herr, cfg.HandshakeTimeout)
		return nil, herr
	}
	if r.ProtoMajor == 2 {
		return u.upgradeH2(w, r, cfg, c, hs, extra)
	}
	resp := handshake.AppendResponse(make([]byte, 0, 256), hs.key, hs.subprotocol, hs.extensions(), w.Header(), cfg.ResponseHeader, extra)
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot take over the connection", http.StatusInternalServerError)
		return nil, fmt.Errorf("gust: hijack: %w", err)
	}
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Reader.Peek(n)
	}
	nc.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	if _, err := nc.Write(resp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("gust: writing handshake response: %w", err)
	}
	nc.SetDeadline(time.Time{})
	c.open(nc, buffered, hs)
	return c, nil
}

// upgradeH2 answers an RFC 8441 extended CONNECT with 200, with the fields
// accept checked, and makes a Conn of the HTTP/2 stream (h2conn.Accept).
func (u *Upgrader) upgradeH2(w http.ResponseWriter, r *http.Request, cfg *config, c *Conn, hs handshakeResult, extra http.Header) (*Conn, error) {
	handshake.SetResponse(w.Header(), hs.subprotocol, hs.extensions(), cfg.ResponseHeader, extra)
	s, err := h2conn.Accept(w, r)
	if err != nil {
		return nil, fmt.Errorf("gust: flushing the HTTP/2 handshake response: %w", err)
	}
	c.open(s, nil, hs)
	return c, nil
}

// handshakeResult is what a server's handshake settled.
type handshakeResult struct {
	key         string
	subprotocol string
	deflate     *deflate.Params
}

// extensions is the response's Sec-WebSocket-Extensions, or "".
func (hs *handshakeResult) extensions() string {
	if hs.deflate == nil {
		return ""
	}
	return hs.deflate.String()
}

// checkRequest checks a handshake request (RFC 6455 §4.2.1, RFC 8441 §4)
// and settles the subprotocol and extensions.
func (cfg *config) checkRequest(r *http.Request) (handshakeResult, *HandshakeError) {
	key, herr := handshake.CheckRequest(r, cfg.CheckOrigin)
	if herr != nil {
		return handshakeResult{}, refusal(herr.Status, herr.Reason)
	}
	hs := handshakeResult{key: key, subprotocol: handshake.SelectSubprotocol(cfg.Subprotocols, r.Header)}
	if cfg.deflate.Enabled {
		offers, _ := handshake.Extensions(r.Header) // a malformed header declines compression
		if p, ok := deflate.Negotiate(offers, &cfg.deflate); ok {
			hs.deflate = &p
		}
	}
	return hs, nil
}

// errNotOpen is what a Conn whose handshake is in progress (the one
// OnRequest receives) returns to a write, a Close or a Ping.
var errNotOpen = fmt.Errorf("gust: connection not open yet: its handshake is in progress (a write from Upgrader.OnRequest? write from OnOpen): %w", net.ErrClosed)

// closedErr is the error of a call on c without a connection: errNotOpen
// while its handshake is in progress, else (a zero Conn) net.ErrClosed.
func (c *Conn) closedErr() error {
	if c.cfg != nil {
		return errNotOpen
	}
	return errClosed
}

// endedErr is the error of a call that found netClosed set: errNotOpen
// while the handshake is in progress, else net.ErrClosed. It takes the
// write lock to read c.conn, which open sets under it.
func (c *Conn) endedErr() error {
	if c.cfg == nil {
		return errClosed
	}
	c.wr.mu.Lock()
	pending := c.conn == nil
	c.wr.mu.Unlock()
	if pending {
		return errNotOpen
	}
	return errClosed
}
