package gust

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gustws/gust/internal/handshake"
)

// A Server's requests that are not WebSocket handshakes go to HTTPHandler:
// the connection, with the bytes read put back in front, is handed to an
// http.Server of its own through a listener (connFeed). A handshake that
// comes later on such a connection (clients and proxies that pool their
// connections send one) is taken back from net/http and answered as a
// first request is.

// httpSide is the net/http server behind HTTPHandler, started by the first
// request for it.
type httpSide struct {
	srv    *http.Server
	feed   *connFeed
	served chan struct{} // closed when srv.Serve has returned
}

// tlsStateKey is the context key under which ConnContext keeps the TLS
// state of a handed-over connection, for the requests' r.TLS.
type tlsStateKey struct{}

// serveHTTP hands nc, whose first request is not a WebSocket handshake, to
// net/http. Once a shutdown has started, it closes nc instead.
func (s *Server) serveHTTP(nc net.Conn) {
	s.mu.Lock()
	if s.Upgrader.track.Closing() {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.http == nil {
		s.http = newHTTPSide(s.config(), s.takeUpgrades(s.HTTPHandler))
	}
	hs := s.http
	s.mu.Unlock()
	hs.feed.hand(nc)
}

// takeUpgrades returns h, except for WebSocket handshakes, which the Server
// answers itself (upgradeHijacked).
func (s *Server) takeUpgrades(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !handshake.HasToken(r.Header, "Upgrade", "websocket") {
			h.ServeHTTP(w, r)
			return
		}
		s.upgradeHijacked(w, r)
	})
}

// upgradeHijacked takes the connection of r, a handshake net/http read on
// a connection it kept alive, and serves it as serveConn serves a new one:
// the same checks and answer, the bytes net/http had read after the head
// kept, onto an event loop in netpoll mode, covered by Shutdown.
func (s *Server) upgradeHijacked(w http.ResponseWriter, r *http.Request) {
	if !s.Upgrader.track.Begin() {
		refuseShuttingDown(w)
		return
	}
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.Upgrader.track.End()
		http.Error(w, "cannot take over the connection", http.StatusInternalServerError)
		return
	}
	after, _ := brw.Reader.Peek(brw.Reader.Buffered())
	after = bytes.Clone(after)
	if rc, ok := nc.(*readAheadConn); ok {
		// What the Server had read and net/http had not yet, after what
		// net/http had.
		after = append(after, rc.ahead...)
		nc = rc.Conn
	}
	r.TLS = nil
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		r.TLS = &st
	}
	s.run(nc, func(nc net.Conn) (*Conn, net.Conn) {
		deadline := time.Now().Add(s.config().HandshakeTimeout)
		nc.SetDeadline(deadline)
		return s.upgrade(nc, r, deadline, after, nil), nil
	})
}

// newHTTPSide starts a net/http server for h with the Server's limits:
// HandshakeTimeout for a request, its response, and an idle connection.
func newHTTPSide(cfg *config, h http.Handler) *httpSide {
	var protocols http.Protocols
	protocols.SetHTTP1(true) // the Server's parser read an HTTP/1.x head
	hs := &httpSide{
		srv: &http.Server{
			Handler:           withTLSState(h),
			ReadTimeout:       cfg.HandshakeTimeout,
			ReadHeaderTimeout: cfg.HandshakeTimeout,
			WriteTimeout:      cfg.HandshakeTimeout,
			IdleTimeout:       cfg.HandshakeTimeout,
			MaxHeaderBytes:    cfg.MaxHeaderBytes,
			Protocols:         &protocols,
			ErrorLog:          slog.NewLogLogger(cfg.logger().Handler(), slog.LevelError),
			ConnContext:       tlsContext,
		},
		feed:   &connFeed{conns: make(chan net.Conn), done: make(chan struct{})},
		served: make(chan struct{}),
	}
	go func() {
		defer close(hs.served)
		hs.srv.Serve(hs.feed)
	}()
	return hs
}

// shutdown shuts the net/http server down, and closes its connections if
// ctx ends first.
func (hs *httpSide) shutdown(ctx context.Context) error {
	err := hs.srv.Shutdown(ctx)
	if err != nil {
		hs.srv.Close()
	}
	hs.feed.Close()
	<-hs.served
	return err
}

// close closes the net/http server and its connections.
func (hs *httpSide) close() {
	hs.srv.Close()
	hs.feed.Close()
	<-hs.served
}

// tlsContext keeps the TLS state of a connection that came over TLS, which
// net/http cannot see through the readAheadConn around it.
func tlsContext(ctx context.Context, nc net.Conn) context.Context {
	if rc, ok := nc.(*readAheadConn); ok {
		if tc, ok := rc.Conn.(*tls.Conn); ok {
			st := tc.ConnectionState()
			return context.WithValue(ctx, tlsStateKey{}, &st)
		}
	}
	return ctx
}

// withTLSState sets r.TLS from what tlsContext kept before calling h.
func withTLSState(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok && r.TLS == nil {
			r.TLS = st
		}
		h.ServeHTTP(w, r)
	})
}

// readAheadConn is a net.Conn whose reads return the bytes the Server had
// already read from it, then what follows.
type readAheadConn struct {
	net.Conn
	ahead []byte
}

// newReadAheadConn returns nc with a copy of ahead put back in front.
func newReadAheadConn(nc net.Conn, ahead []byte) *readAheadConn {
	return &readAheadConn{Conn: nc, ahead: append([]byte(nil), ahead...)}
}

func (c *readAheadConn) Read(p []byte) (int, error) {
	if len(c.ahead) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.ahead)
	c.ahead = c.ahead[n:]
	if len(c.ahead) == 0 {
		c.ahead = nil // let the copy go
	}
	return n, nil
}

// CloseWrite half-closes the connection when the one underneath can, as
// net/http does before closing, so that the client reads the response.
func (c *readAheadConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// connFeed is the net.Listener through which a Server hands connections to
// its net/http server, until Close.
type connFeed struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// hand passes nc to Accept, or closes it once the feed is closed.
func (f *connFeed) hand(nc net.Conn) {
	select {
	case f.conns <- nc:
	case <-f.done:
		nc.Close()
	}
}

func (f *connFeed) Accept() (net.Conn, error) {
	select {
	case nc := <-f.conns:
		return nc, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *connFeed) Close() error {
	f.once.Do(func() { close(f.done) })
	return nil
}

// Addr returns a placeholder: the connections come from the Server's
// listeners.
func (f *connFeed) Addr() net.Addr { return feedAddr{} }

type feedAddr struct{}

func (feedAddr) Network() string { return "gust" }
func (feedAddr) String() string  { return "gust.Server" }
