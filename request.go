package gust

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
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
		chosen, err := handshake.ChosenSubprotocol(r.Header, extra)
		if err != nil {
			return nil, nil, cfg.misuse(r, err)
		}
		if chosen != "" {
			hs.subprotocol = chosen
		}
	}
	for _, fields := range [...]http.Header{pre, cfg.ResponseHeader, extra} {
		if err := handshake.CheckFields(fields, handshake.ResponseOwn); err != nil {
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
	if err := handshake.CheckFields(refusal.Header, handshake.RefusalOwn); err != nil {
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

// writeRefusal answers, on a Server's connection, a handshake that accept
// refused: the status, header fields and body of herr, with Connection:
// close since the connection ends. The connection's handshake deadline
// bounds the write, however large the body. Without a Content-Type of its
// own, a body gets the one net/http would give it.
func writeRefusal(nc net.Conn, herr *HandshakeError) error {
	head := handshake.AppendRefusal(make([]byte, 0, 256), herr.Status, herr.Header, herr.Body)
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
		if !handshake.RefusalOwn(k) {
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
