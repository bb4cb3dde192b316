package gust

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gustws/gust/internal/handshake"
)

// The handshake as the application sees it: OnRequest, the response's
// header fields and the application's refusals. Both server paths and both
// protocols go through accept; they differ only in how they answer.

// accept runs OnRequest, if set, for a request checkRequest passed, and
// checks the response's fields: pre (an Upgrader's ResponseWriter's),
// ResponseHeader and OnRequest's, which it returns with the Conn-to-be, or
// the refusal. A subprotocol OnRequest chose replaces hs's.
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

// callOnRequest calls OnRequest and turns its error into a refusal; a
// panic is logged and answered with 500, unless DisableRecovery is set.
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

// refusalOf makes the refusal that answers OnRequest's err: a
// *HandshakeError in its chain gives the status (403 when 0), the fields and
// the body; any other error gives 403 with no body, so nothing of it reaches
// the client. It copies: the application may share its error value.
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

// misuse answers with 500, and logs why, a handshake that cannot be answered
// as the application asked (a field that would corrupt the response, a
// subprotocol the client did not offer).
func (cfg *config) misuse(r *http.Request, err error) *HandshakeError {
	err = fmt.Errorf("gust: handshake from %s: %w", r.RemoteAddr, err)
	cfg.logger().LogAttrs(r.Context(), slog.LevelError, "gust: handshake answered with 500",
		slog.String("remote", r.RemoteAddr), slog.Int("status", http.StatusInternalServerError), slog.Any("err", err))
	return &HandshakeError{Status: http.StatusInternalServerError, Err: err}
}

// writeRefusal answers herr on a Server's connection, with Connection:
// close, under the handshake deadline; a body without a Content-Type gets
// the one net/http would give it.
func writeRefusal(nc net.Conn, herr *HandshakeError) error {
	head := handshake.AppendRefusal(make([]byte, 0, 256), herr.Status, herr.Header, herr.Body)
	bufs := net.Buffers{head, herr.Body}
	_, err := bufs.WriteTo(nc)
	return err
}

// respondRefusal answers herr through an Upgrader's ResponseWriter, its
// fields replacing those of the same name in w, within timeout.
func respondRefusal(w http.ResponseWriter, herr *HandshakeError, timeout time.Duration) {
	handshake.SetRefusal(w.Header(), herr.Header, len(herr.Body))
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(timeout)) // ErrNotSupported: net/http's own timeouts apply
	w.WriteHeader(herr.Status)
	w.Write(herr.Body)
	rc.Flush()
	// No deadline is left for the requests that may follow on the
	// connection: net/http sets its WriteTimeout's, if any, for each.
	rc.SetWriteDeadline(time.Time{})
}
