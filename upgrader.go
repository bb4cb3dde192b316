package gust

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gustws/gust/internal/handshake"
)

// Upgrader turns net/http requests into WebSocket connections. It is safe
// for concurrent use; make one per set of Options and Event handler.
type Upgrader struct {
	handler Event
	cfg     *config
}

// NewUpgrader returns an Upgrader whose connections report to h. A nil opts
// means the defaults.
func NewUpgrader(h Event, opts *Options) *Upgrader {
	return &Upgrader{handler: h, cfg: newConfig(opts)}
}

// HandshakeError is a refused handshake: the HTTP status gust answered with
// and why.
type HandshakeError struct {
	Status int
	Reason string
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("gust: handshake refused with %d: %s", e.Status, e.Reason)
}

// Upgrade checks the handshake request, answers it and returns the
// connection; the caller then runs its ReadLoop. When the request is not an
// acceptable WebSocket handshake, Upgrade answers with the HTTP status RFC
// 6455 names (400, 403 for a refused origin, 405 for a method other than
// GET, 426 with Sec-WebSocket-Version: 13 for another version) and a short
// body, and returns a *HandshakeError.
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
func (u *Upgrader) Upgrade(w http.ResponseWriter, r *http.Request) (*Conn, error) {
	hs, herr := u.cfg.checkRequest(r)
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
		http.Error(w, herr.Reason, herr.Status)
		return nil, herr
	}
	if r.ProtoMajor == 2 {
		return u.upgradeH2(w, r, hs)
	}
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "websocket: cannot take over the connection", http.StatusInternalServerError)
		return nil, fmt.Errorf("gust: hijack: %w", err)
	}
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Reader.Peek(n)
	}
	resp := u.cfg.appendResponse(make([]byte, 0, 256), hs)
	nc.SetDeadline(time.Now().Add(u.cfg.HandshakeTimeout))
	if _, err := nc.Write(resp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("gust: writing handshake response: %w", err)
	}
	nc.SetDeadline(time.Time{})
	return newServerConn(nc, u.cfg, u.handler, buffered, hs), nil
}

// handshakeResult is what a server's handshake settled.
type handshakeResult struct {
	key         string
	subprotocol string
	deflate     *deflateParams
}

// checkRequest checks a handshake request (RFC 6455 §4.2.1) and settles the
// subprotocol and extensions.
func (cfg *config) checkRequest(r *http.Request) (hs handshakeResult, herr *HandshakeError) {
	fail := func(status int, reason string) (handshakeResult, *HandshakeError) {
		return handshakeResult{}, &HandshakeError{Status: status, Reason: reason}
	}
	h2 := r.ProtoMajor == 2
	var key string
	if h2 {
		// RFC 8441 §4: an extended CONNECT with :protocol websocket, and no
		// Upgrade, Connection or Sec-WebSocket-Key.
		if r.Method != http.MethodConnect {
			return fail(http.StatusMethodNotAllowed, "websocket: over HTTP/2 the handshake method must be CONNECT")
		}
		if !strings.EqualFold(r.Header.Get(":protocol"), "websocket") {
			return fail(http.StatusBadRequest, "websocket: :protocol must be websocket")
		}
	} else {
		if r.Method != http.MethodGet {
			return fail(http.StatusMethodNotAllowed, "websocket: handshake method must be GET")
		}
		if !r.ProtoAtLeast(1, 1) {
			return fail(http.StatusBadRequest, "websocket: handshake needs HTTP/1.1")
		}
		if !handshake.HasToken(r.Header, "Connection", "upgrade") {
			return fail(http.StatusBadRequest, "websocket: Connection header must contain upgrade")
		}
		if !handshake.HasToken(r.Header, "Upgrade", "websocket") {
			return fail(http.StatusBadRequest, "websocket: Upgrade header must be websocket")
		}
		// The handshake is a GET (RFC 6455 §4.1), whose content has no
		// defined meaning (RFC 9110 §9.3.1), and the bytes after the head
		// are read as WebSocket frames: a body would be taken for frames.
		// net/http passes such a request on, so the check is ours. Over
		// HTTP/2 the stream's data is the WebSocket connection itself.
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			return fail(http.StatusBadRequest, "websocket: handshake request must not have a body")
		}
	}
	if v := r.Header.Values("Sec-WebSocket-Version"); len(v) != 1 || v[0] != "13" {
		return fail(http.StatusUpgradeRequired, "websocket: unsupported version; this server speaks 13")
	}
	if !h2 {
		key = r.Header.Get("Sec-WebSocket-Key")
		if len(r.Header.Values("Sec-WebSocket-Key")) != 1 || !handshake.ValidKey(key) {
			return fail(http.StatusBadRequest, "websocket: missing or invalid Sec-WebSocket-Key")
		}
	}
	check := cfg.CheckOrigin
	if check == nil {
		check = sameOrigin
	}
	if !check(r) {
		return fail(http.StatusForbidden, "websocket: origin not allowed")
	}
	hs = handshakeResult{key: key, subprotocol: cfg.selectSubprotocol(r.Header)}
	if cfg.Compression.Enabled {
		offers, _ := handshake.Extensions(r.Header) // a malformed header declines compression
		if p, ok := negotiateDeflate(offers, &cfg.Compression); ok {
			hs.deflate = &p
		}
	}
	return hs, nil
}

// sameOrigin accepts requests without an Origin header and requests whose
// Origin host is the request's Host.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Values("Origin")
	if len(origin) == 0 {
		return true
	}
	u, err := url.Parse(origin[0])
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

func (cfg *config) selectSubprotocol(h http.Header) string {
	if len(cfg.Subprotocols) == 0 {
		return ""
	}
	offered := handshake.Tokens(h, "Sec-WebSocket-Protocol")
	for _, p := range cfg.Subprotocols {
		for _, o := range offered {
			if o == p {
				return p
			}
		}
	}
	return ""
}

// appendResponse appends the 101 response to b.
func (cfg *config) appendResponse(b []byte, hs handshakeResult) []byte {
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	b = append(b, handshake.AcceptKey(hs.key)...)
	b = append(b, "\r\n"...)
	if hs.subprotocol != "" {
		b = append(b, "Sec-WebSocket-Protocol: "...)
		b = append(b, hs.subprotocol...)
		b = append(b, "\r\n"...)
	}
	if hs.deflate != nil {
		b = append(b, "Sec-WebSocket-Extensions: "...)
		b = append(b, hs.deflate.String()...)
		b = append(b, "\r\n"...)
	}
	if len(cfg.ResponseHeader) > 0 {
		var buf bytes.Buffer
		cfg.ResponseHeader.Write(&buf) // drops CR and LF inside values
		b = append(b, buf.Bytes()...)
	}
	return append(b, "\r\n"...)
}

// appendErrorResponse appends a complete HTTP error response to b, for the
// Server path, which does not go through net/http.
func appendErrorResponse(b []byte, status int, reason string) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"...)
	switch status {
	case http.StatusUpgradeRequired:
		b = append(b, "Sec-WebSocket-Version: 13\r\n"...)
	case http.StatusMethodNotAllowed:
		b = append(b, "Allow: GET\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(reason)+1), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, reason...)
	return append(b, '\n')
}
