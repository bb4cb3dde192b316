package gust

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gustws/gust/internal/handoff"
	"github.com/gustws/gust/internal/handshake"
)

// A Server's requests that are not WebSocket handshakes go to HTTPHandler:
// the connection, with the bytes read put back in front, is handed to an
// http.Server of its own through a listener (internal/handoff). A
// handshake that comes later on such a connection (clients and proxies
// that pool their connections send one) is taken back from net/http and
// answered as a first request is.

// httpSide is the net/http server behind HTTPHandler, started by the first
// request for it.
type httpSide struct {
	srv    *http.Server
	feed   *handoff.Listener
	served chan struct{} // closed when srv.Serve has returned
}

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
	hs.feed.Hand(nc)
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
	if rc, ok := nc.(*handoff.Conn); ok {
		// What the Server had read and net/http had not yet, after what
		// net/http had.
		after = append(after, rc.Ahead...)
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
			Handler:           handoff.WithTLSState(h),
			ReadTimeout:       cfg.HandshakeTimeout,
			ReadHeaderTimeout: cfg.HandshakeTimeout,
			WriteTimeout:      cfg.HandshakeTimeout,
			IdleTimeout:       cfg.HandshakeTimeout,
			MaxHeaderBytes:    cfg.MaxHeaderBytes,
			Protocols:         &protocols,
			ErrorLog:          slog.NewLogLogger(cfg.logger().Handler(), slog.LevelError),
			ConnContext:       handoff.ConnContext,
		},
		feed:   handoff.NewListener(),
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
