package gust

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gustws/gust/internal/handshake"
)

// The handshake as the application sees it: Upgrader.OnRequest, the header
// fields of the response, and the refusals the application makes. Both
// server paths (an Upgrader's net/http handler and a Server's own parser)
// and both protocols (HTTP/1.1, and RFC 8441 over HTTP/2) go through
// accept; they differ only in how they write the answer.

// accept runs OnRequest, if set, for a request that checkRequest passed, and
// checks the header fields the response will carry: pre (the
// ResponseWriter's, on an Upgrader), ResponseHeader, and those OnRequest
// added. It returns the Conn-to-be and the fields OnRequest added (nil
// without OnRequest), or the refusal to answer with. A subprotocol
// OnRequest chose replaces the one checkRequest selected in hs.
func (cfg *config) accept(r *http.Request, hs *handshakeResult, h Event, pre http.Header) (*Conn, http.Header, *HandshakeError) {
	c := newPendingConn(cfg, h)
	var extra http.Header
	if cfg.OnRequest != nil {
		extra = make(http.Header)
		if herr := cfg.callOnRequest(r, extra, c); herr != nil {
			return nil, nil, herr
		}
		if err := chooseSubprotocol(r.Header, extra, hs); err != nil {
			return nil, nil, cfg.misuse(r, err)
		}
	}
	for _, fields := range [...]http.Header{pre, cfg.ResponseHeader, extra} {
		if err := checkFields(fields, responseOwn); err != nil {
			return nil, nil, cfg.misuse(r, fmt.Errorf("response header: %w", err))
		}
	}
	return c, extra, nil
}

// callOnRequest calls OnRequest and turns what it returned into a refusal.
// A panic in it, unless Options.DisableRecovery is set, is logged with its
// stack and answered with 500.
func (cfg *config) callOnRequest(r *http.Request, extra http.Header, c *Conn) (herr *HandshakeError) {
	if !cfg.DisableRecovery {
		defer func() {
			if p := recover(); p != nil {
				pe := &PanicError{Value: p, Stack: debug.Stack()}
				cfg.logger().LogAttrs(r.Context(), slog.LevelError, "gust: panic in OnRequest",
					slog.String("remote", r.RemoteAddr), slog.Int("status", http.StatusInternalServerError),
					slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(pe.Stack)))
				herr = &HandshakeError{Status: http.StatusInternalServerError, Err: pe}
			}
		}()
	}
	err := cfg.OnRequest(r, extra, c)
	if err == nil {
		return nil
	}
	return cfg.refusalOf(r, err)
}

// refusalOf makes the refusal that answers err, which OnRequest returned: a
// *HandshakeError in err's chain gives the status (403 when 0), the header
// fields and the body; any other error gives 403 with no body, so that
// nothing of the error reaches the client. The result is a copy: the
// application's error may be a value it shares between requests.
func (cfg *config) refusalOf(r *http.Request, err error) *HandshakeError {
	var he *HandshakeError
	if !errors.As(err, &he) || he == nil {
		return &HandshakeError{Status: http.StatusForbidden, Err: err}
	}
	refusal := *he
	if refusal.Status == 0 {
		refusal.Status = http.StatusForbidden
	}
	if refusal.Status < 300 || refusal.Status > 599 {
		// A 1xx would not end the response, and a 2xx would accept the
		// handshake over HTTP/2.
		return cfg.misuse(r, fmt.Errorf("refusal with status %d: a refusal needs a 3xx, 4xx or 5xx status", refusal.Status))
	}
	if err := checkFields(refusal.Header, refusalOwn); err != nil {
		return cfg.misuse(r, fmt.Errorf("refusal header: %w", err))
	}
	if refusal.Err == nil && err != error(he) {
		refusal.Err = err // the application's wrapping, for the caller of Upgrade
	}
	return &refusal
}

// misuse answers a handshake that cannot be answered as the application
// asked (a header field that would corrupt the response, a subprotocol the
// client did not offer) with 500, and logs why: the client learns nothing
// of it.
func (cfg *config) misuse(r *http.Request, err error) *HandshakeError {
	err = fmt.Errorf("gust: handshake from %s: %w", r.RemoteAddr, err)
	cfg.logger().LogAttrs(r.Context(), slog.LevelError, "gust: handshake answered with 500",
		slog.String("remote", r.RemoteAddr), slog.Int("status", http.StatusInternalServerError), slog.Any("err", err))
	return &HandshakeError{Status: http.StatusInternalServerError, Err: err}
}

// chooseSubprotocol takes the Sec-WebSocket-Protocol field out of extra,
// where OnRequest may have set it, and makes its value the subprotocol. The
// value must be one of the subprotocols the client offered (RFC 6455
// §4.2.2): a client fails a handshake that names another.
func chooseSubprotocol(req, extra http.Header, hs *handshakeResult) error {
	var chosen []string
	for k, v := range extra {
		if strings.EqualFold(k, "Sec-WebSocket-Protocol") {
			chosen = append(chosen, v...)
			delete(extra, k)
		}
	}
	if chosen == nil {
		return nil
	}
	offered := handshake.Tokens(req, "Sec-WebSocket-Protocol")
	if len(chosen) != 1 || !slices.Contains(offered, chosen[0]) {
		return fmt.Errorf("OnRequest chose the subprotocol %q; the client offered %q", chosen, offered)
	}
	hs.subprotocol = chosen[0]
	return nil
}

// The fields the handshake writes itself, which are skipped in those the
// application gives: a 101 (or an HTTP/2 200) has its own Upgrade,
// Connection and Sec-WebSocket fields and no content (RFC 9110 §8.6), and a
// refusal's length and connection handling are gust's.
var (
	responseFields = [...]string{
		"Upgrade", "Connection", "Sec-WebSocket-Accept", "Sec-WebSocket-Protocol",
		"Sec-WebSocket-Extensions", "Content-Length", "Transfer-Encoding",
	}
	refusalFields = [...]string{"Connection", "Content-Length", "Transfer-Encoding"}
)

func responseOwn(name string) bool { return hasFold(responseFields[:], name) }
func refusalOwn(name string) bool  { return hasFold(refusalFields[:], name) }

func hasFold(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// checkFields returns an error naming the first field of h that would
// corrupt the response it goes into: a name that is not a token, or a
// value with a control character (CR or LF would end the field early and
// let the value write fields, or a body, of its own). Fields own reports
// are skipped, as appendFields skips them.
func checkFields(h http.Header, own func(string) bool) error {
	for k, vs := range h {
		if own(k) {
			continue
		}
		if !handshake.ValidFieldName(k) {
			return fmt.Errorf("invalid field name %q", k)
		}
		for _, v := range vs {
			if !handshake.ValidFieldValue(v) {
				return fmt.Errorf("invalid value %q in field %s", v, k)
			}
		}
	}
	return nil
}

// appendFields appends the fields of h that own does not report, which
// checkFields has passed, one line per value.
func appendFields(b []byte, h http.Header, own func(string) bool) []byte {
	for k, vs := range h {
		if own(k) {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// appendStatusLine appends an HTTP/1.1 status line.
func appendStatusLine(b []byte, status int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	return append(b, "\r\n"...)
}

// writeRefusal answers, on a Server's connection, a handshake that accept
// refused: the status, header fields and body of herr, with Connection:
// close since the connection ends. The connection's handshake deadline
// bounds the write, however large the body. Without a Content-Type of its
// own, a body gets the one net/http would give it.
func writeRefusal(nc net.Conn, herr *HandshakeError) error {
	head := appendStatusLine(make([]byte, 0, 256), herr.Status)
	head = append(head, "Connection: close\r\n"...)
	if len(herr.Body) > 0 && herr.Header.Get("Content-Type") == "" {
		head = append(head, "Content-Type: "...)
		head = append(head, http.DetectContentType(herr.Body)...)
		head = append(head, "\r\n"...)
	}
	head = appendFields(head, herr.Header, refusalOwn)
	head = append(head, "Content-Length: "...)
	head = strconv.AppendInt(head, int64(len(herr.Body)), 10)
	head = append(head, "\r\n\r\n"...)
	bufs := net.Buffers{head, herr.Body}
	_, err := bufs.WriteTo(nc)
	return err
}

// respondRefusal answers, through an Upgrader's ResponseWriter, a handshake that
// accept refused: the status, header fields and body of herr, the fields
// replacing those of the same name that w held, within timeout however
// large the body.
func respondRefusal(w http.ResponseWriter, herr *HandshakeError, timeout time.Duration) {
	h := w.Header()
	for k, v := range herr.Header {
		if !refusalOwn(k) {
			h[k] = v
		}
	}
	h.Del("Transfer-Encoding")
	h.Set("Content-Length", strconv.Itoa(len(herr.Body)))
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(timeout)) // ErrNotSupported: net/http's own timeouts apply
	w.WriteHeader(herr.Status)
	w.Write(herr.Body)
	rc.Flush()
	// No deadline is left for the requests that may follow on the
	// connection: net/http sets its WriteTimeout's, if any, for each.
	rc.SetWriteDeadline(time.Time{})
}
