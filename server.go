package gust

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/handoff"
	"github.com/gustws/gust/internal/handshake"
	"github.com/gustws/gust/internal/netpoll"
)

// Server accepts WebSocket connections on any net.Listener with its own
// accept loop and HTTP/1.1 handshake parser, without net/http: less memory
// and latency per connection. Every request with an Upgrade: websocket
// field is a handshake, whatever its path (OnRequest may refuse it); the
// others go to HTTPHandler, or are refused when it is nil. For more than a
// few plain HTTP routes, use an Upgrader inside a net/http server.
//
// Its Upgrader field holds the handler, the connections' Options and the
// handshake's settings, as net/http's Server holds a Handler. The zero
// value is ready to use; set the fields before the first Serve and do not
// change them afterwards. Each connection runs its ReadLoop in the
// goroutine that accepted it.
type Server struct {
	// Upgrader's fields configure the connections and their handshakes as
	// on an Upgrader; the Server answers the handshakes itself, without
	// calling Upgrade. Default: the zero Upgrader.
	Upgrader Upgrader

	// MaxHeaderBytes bounds the handshake request head; a larger one is
	// refused with 431. Default 16 KiB. Memory: a pending handshake holds a
	// 512-byte buffer that doubles as the head arrives, up to this bound.
	MaxHeaderBytes int

	// TLSConfig is used by ListenAndServeTLS, copied, with the certificate
	// files added. Default nil: a config with only those certificates.
	TLSConfig *tls.Config

	// HTTPHandler, if set, serves the requests without an Upgrade:
	// websocket field (a health check, a metrics scrape) through net/http on
	// the same connection. A later request on it that asks for a WebSocket
	// (clients and proxies that pool connections send one) is answered by
	// the Server as a first request is. A request has HandshakeTimeout to
	// arrive and as long for its response, an idle connection as long for
	// its next request; heads are bounded by MaxHeaderBytes. Shutdown and
	// Close cover these connections; OnRequest and Metrics do not see their
	// plain requests. Default nil: such a request is refused as a failed
	// handshake.
	HTTPHandler http.Handler

	serverOnce sync.Once
	serverCfg  *config

	// The connections themselves are in Upgrader.track.
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	pending   map[net.Conn]struct{} // accepted, handshake not done
	http      *httpSide             // serves HTTPHandler; made by the first request for it
}

// config returns the Server's settings with the defaults filled in, made
// on first use.
func (s *Server) config() *config {
	s.serverOnce.Do(func() { s.serverCfg = s.Upgrader.newConfig(s.MaxHeaderBytes, s.TLSConfig) })
	return s.serverCfg
}

// ListenAndServe listens on the TCP address addr and calls Serve.
func (s *Server) ListenAndServe(addr string) error {
	if s.Upgrader.track.Closing() {
		return ErrServerClosed
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// ListenAndServeTLS listens on the TCP address addr and calls ServeTLS.
func (s *Server) ListenAndServeTLS(addr, certFile, keyFile string) error {
	if s.Upgrader.track.Closing() {
		return ErrServerClosed
	}
	cfg, err := s.tlsConfig(certFile, keyFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.serveTLS(ln, cfg)
}

// ServeTLS serves WebSockets over TLS on ln, with TLSConfig (if set) and
// the certificate and key files (if not empty), as Serve does. In netpoll
// mode its connections are served by the event loops once their TLS
// handshake is done, which a *tls.Conn made by a tls.NewListener of yours
// cannot be: crypto/tls reads the net.Conn it was made over for its life.
func (s *Server) ServeTLS(ln net.Listener, certFile, keyFile string) error {
	cfg, err := s.tlsConfig(certFile, keyFile)
	if err != nil {
		ln.Close()
		return err
	}
	return s.serveTLS(ln, cfg)
}

// serveTLS makes its *tls.Conns over netpoll.Unders in either mode: in
// netpoll mode the loops take them, and in both the Under follows the
// records, which MessageTimeout bounds.
func (s *Server) serveTLS(ln net.Listener, cfg *tls.Config) error {
	return s.Serve(tls.NewListener(netpoll.Listener(ln), cfg))
}

// tlsConfig is a copy of TLSConfig with the certificate files added.
func (s *Server) tlsConfig(certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{}
	if s.TLSConfig != nil {
		cfg = s.TLSConfig.Clone()
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = append(cfg.Certificates, cert)
	}
	return cfg, nil
}

// Serve accepts connections on ln until Shutdown or Close, then returns
// ErrServerClosed. Temporary accept errors (running out of file
// descriptors) are logged and retried with a growing pause; others are
// returned.
func (s *Server) Serve(ln net.Listener) error {
	cfg := s.config()
	s.mu.Lock()
	if s.Upgrader.track.Closing() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
		s.pending = make(map[net.Conn]struct{})
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.Upgrader.track.Closing() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				cfg.logger().LogAttrs(context.Background(), slog.LevelError, "gust: accept error; retrying",
					slog.String("listener", ln.Addr().String()), slog.Any("err", err), slog.Duration("retry_in", pause))
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		if !s.Upgrader.track.Begin() { // Shutdown or Close came between Accept and here
			nc.Close()
			return ErrServerClosed
		}
		go s.serveConn(nc)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// serveConn reads and answers the handshake, then runs the read loop. Serve
// has reserved the connection's place in the tracker.
func (s *Server) serveConn(nc net.Conn) {
	s.run(nc, s.handshake)
}

// run answers the handshake on nc with handshake, then runs the read loop,
// or hands nc to net/http when handshake returns it as plain. The caller
// has reserved the connection's place in the tracker; a shutdown drops the
// handshake meanwhile.
func (s *Server) run(nc net.Conn, handshake func(net.Conn) (c *Conn, plain net.Conn)) {
	s.mu.Lock()
	if s.Upgrader.track.Closing() {
		s.mu.Unlock()
		nc.Close()
		s.Upgrader.track.End()
		return
	}
	s.pending[nc] = struct{}{}
	s.mu.Unlock()

	c, plain := handshake(nc)

	s.mu.Lock()
	delete(s.pending, nc)
	s.mu.Unlock()
	if plain != nil { // no WebSocket: net/http's from here on
		s.Upgrader.track.End()
		s.serveHTTP(plain)
		return
	}
	if c == nil {
		nc.Close()
		s.Upgrader.track.End()
		return
	}
	// Set before Add, which may cut c: c's end forgets it from c.tracker.
	// Add sends 1001 first if a shutdown has started.
	c.tracker = &s.Upgrader.track
	if s.Upgrader.track.Add(c) {
		c.ReadLoop()
	}
}

// commit takes nc out of the handshakes a shutdown drops, before its 101
// goes out (a shutdown then closes it with 1001); false if the shutdown came
// first and closed nc.
func (s *Server) commit(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Upgrader.track.Closing() {
		return false
	}
	delete(s.pending, nc)
	return true
}

// handshake reads the request head (handshake.ReadHead), checks it, and
// answers with 101 or an HTTP error. It returns nil when nc must be closed,
// and plain (nc with the bytes read put back) for HTTPHandler.
func (s *Server) handshake(nc net.Conn) (c *Conn, plain net.Conn) {
	cfg := s.config()
	deadline := time.Now().Add(cfg.HandshakeTimeout)
	nc.SetDeadline(deadline)
	head, err := handshake.ReadHead(nc, cfg.MaxHeaderBytes)
	if err != nil {
		var he *handshake.Error
		if errors.As(err, &he) {
			refuse(nc, cfg, he.Status, he.Reason)
		} else if head.Read > 0 { // a client that sent nothing is not a handshake (a TCP health check)
			cfg.reportHandshake(0)
		}
		return nil, nil
	}
	defer bufpool.Put(head.Buf)
	read := (*head.Buf)[:head.Read]
	if s.HTTPHandler != nil && !handshake.HasToken(head.Header, "Upgrade", "websocket") {
		return nil, handoff.NewConn(nc, read)
	}
	r, herr := newHTTPRequest(head.Request, nc)
	if herr != nil {
		refuse(nc, cfg, herr.Status, string(herr.Body))
		return nil, nil
	}
	return s.upgrade(nc, r, deadline, read[head.N:], read[head.Read:]), nil
}

// upgrade answers r, a handshake request that came on nc before deadline,
// with 101 (appended to scratch) or an HTTP error, and opens the Conn with
// the bytes that followed the request's head; nil when nc must be closed.
func (s *Server) upgrade(nc net.Conn, r *http.Request, deadline time.Time, after, scratch []byte) *Conn {
	cfg := s.config()
	if s.Upgrader.track.Draining() {
		herr := drainRefusal()
		writeRefusal(nc, herr)
		cfg.reportHandshake(herr.Status)
		return nil
	}
	hs, herr := cfg.checkRequest(r)
	if herr != nil {
		refuse(nc, cfg, herr.Status, string(herr.Body))
		return nil
	}
	if cfg.OnRequest != nil {
		// As net/http's, the request's context carries the local address;
		// it ends with the handshake, or when its time runs out.
		ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, nc.LocalAddr())
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		r = r.WithContext(ctx)
	}
	c, extra, herr := cfg.accept(r, &hs, s.Upgrader.handler(), nil)
	if herr != nil {
		writeRefusal(nc, herr)
		cfg.reportHandshake(herr.Status)
		return nil
	}
	if !s.commit(nc) {
		return nil
	}
	if _, err := nc.Write(handshake.AppendResponse(scratch, hs.key, hs.subprotocol, hs.extensions(), cfg.ResponseHeader, extra)); err != nil {
		cfg.reportHandshake(0)
		return nil
	}
	cfg.reportHandshake(http.StatusSwitchingProtocols)
	nc.SetDeadline(time.Time{})
	c.open(nc, after, hs) // copies the bytes after the head
	return c
}

// refuse answers a handshake request with an HTTP error, and reports it.
func refuse(nc net.Conn, cfg *config, status int, reason string) {
	nc.Write(handshake.AppendError(nil, status, reason))
	cfg.reportHandshake(status)
}

// newHTTPRequest makes the *http.Request that checkRequest and CheckOrigin
// receive (handshake.Request.HTTPRequest), with the connection's TLS state.
func newHTTPRequest(req *handshake.Request, nc net.Conn) (*http.Request, *HandshakeError) {
	r, herr := req.HTTPRequest(nc.RemoteAddr().String())
	if herr != nil {
		return nil, refusal(herr.Status, herr.Reason)
	}
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		r.TLS = &st
	}
	return r, nil
}

// Shutdown stops accepting and does what [Upgrader.Shutdown] does, for
// every connection the Server accepted and any s.Upgrader.Upgrade made:
// close 1001 to each, then it waits until they have ended or ctx is done,
// cuts the rest and returns ctx.Err(). HTTPHandler's connections are shut
// down as [http.Server.Shutdown] does, and closed when ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.shutdown(ctx, StatusGoingAway, goingAwayReason)
}

// shutdown is Shutdown with the close frame's code and reason (none for
// code 0: tracker.Shutdown).
func (s *Server) shutdown(ctx context.Context, code StatusCode, reason string) error {
	hs := s.stopAccepting()
	if hs == nil {
		return s.Upgrader.track.Shutdown(ctx, uint16(code), reason)
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.shutdown(ctx) }()
	err := s.Upgrader.track.Shutdown(ctx, uint16(code), reason)
	if herr := <-httpDone; err == nil {
		err = herr
	}
	return err
}

// Drain closes the Server's connections over window, for a rolling
// restart, then shuts the Server down as Shutdown does. It is
// [Upgrader.Drain] (which has the details) for every connection the Server
// accepted and any s.Upgrader.Upgrade made, plus this: the Server keeps
// accepting until those connections have ended, so that HTTPHandler goes on
// answering (its health route reports Draining, and the load balancer stops
// sending clients here) while every WebSocket handshake is refused with
// 503 Service Unavailable, Retry-After: 1 and Connection: close. Then it
// stops accepting, and HTTPHandler's connections are shut down as
// [http.Server.Shutdown] does.
func (s *Server) Drain(ctx context.Context, window time.Duration, code StatusCode) error {
	code, err := drainCode(code)
	if err != nil {
		return err
	}
	err = s.Upgrader.track.Drain(ctx, window, uint16(code), drainReason)
	if err == nil {
		err = s.Upgrader.track.WaitEmpty(ctx) // still accepting: the health route answers
	}
	if err != nil {
		s.Close()
		return err
	}
	return s.shutdown(ctx, 0, "") // the closes are sent: stop accepting, wait for the rest
}

// Draining reports whether the Server refuses new WebSocket connections:
// Drain, Shutdown or Close has started. HTTPHandler's health route reads
// it, answering 503 while it holds (see ExampleServer_Drain).
func (s *Server) Draining() bool { return s.Upgrader.Draining() }

// Close stops accepting and cuts every connection, without a close
// handshake (OnClose receives ErrServerClosed); it waits for their OnClose.
func (s *Server) Close() error {
	if hs := s.stopAccepting(); hs != nil {
		hs.close()
	}
	s.Upgrader.track.Close()
	return nil
}

// stopAccepting closes the listeners and drops the handshakes in progress.
// Setting closing first makes Serve, serveConn and serveHTTP, which check
// it under mu, start nothing new. It returns HTTPHandler's server, if any.
func (s *Server) stopAccepting() *httpSide {
	s.Upgrader.track.StartClosing()
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		ln.Close()
	}
	for nc := range s.pending {
		nc.Close()
	}
	return s.http
}
