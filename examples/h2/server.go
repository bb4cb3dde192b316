package main

import (
	"context"
	"crypto/tls"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust"
)

//go:embed index.html
var page []byte

// server is the example's HTTPS server: the page, the echo WebSocket and
// the stats, with every accepted TCP connection counted and numbered so
// that each WebSocket can tell which connection carried it.
type server struct {
	http     *http.Server
	upgrader *gust.Upgrader
	log      *log.Logger

	tcpAccepted atomic.Int64 // by the listener
	tcpIDs      atomic.Int64 // by ConnContext, one per accepted connection
	wsIDs       atomic.Int64
	messages    atomic.Int64

	mu     sync.Mutex
	open   map[*gust.Conn]wsInfo
	stats  Stats
	wsTCP  map[int64]int // TCP connection number → WebSockets it carried
	reqTCP map[int64]int // TCP connection number → HTTP requests it carried
}

// wsInfo is what the server knows of one WebSocket.
type wsInfo struct {
	id    int64
	tcp   int64 // the number of the TCP connection it came over
	proto string
}

// Stats is what /stats answers, as JSON.
type Stats struct {
	// ExtendedConnect: the process started with GODEBUG=http2xconnect=1, so
	// HTTP/2 connections offer WebSockets (SETTINGS_ENABLE_CONNECT_PROTOCOL).
	ExtendedConnect bool `json:"extended_connect"`
	// TCPAccepted counts the TCP connections the listener accepted, this
	// request's included.
	TCPAccepted int64 `json:"tcp_accepted"`
	// TCPWithRequests counts the TCP connections that carried at least one
	// HTTP request (browsers may open a spare connection that carries
	// none); TCPWithWebSockets those that carried at least one WebSocket.
	TCPWithRequests   int `json:"tcp_with_requests"`
	TCPWithWebSockets int `json:"tcp_with_websockets"`
	// WebSockets counts the WebSockets opened; WebSocketsHTTP2 those opened
	// by an extended CONNECT on an HTTP/2 stream, WebSocketsHTTP1 those by
	// an HTTP/1.1 Upgrade; Compressed those that negotiated
	// permessage-deflate; WebSocketsOpen those not closed yet.
	WebSockets      int64 `json:"websockets"`
	WebSocketsHTTP2 int64 `json:"websockets_http2"`
	WebSocketsHTTP1 int64 `json:"websockets_http1"`
	Compressed      int64 `json:"websockets_compressed"`
	WebSocketsOpen  int   `json:"websockets_open"`
	// Messages counts the messages echoed.
	Messages int64 `json:"messages"`
	// Closes counts the closed WebSockets by the status code of their
	// closing ("1000", "4000", ...; "1006" when the connection ended with
	// no close frame).
	Closes map[string]int `json:"closes"`
}

type tcpConnKey struct{}

func newServer(cert tls.Certificate, logger *log.Logger) *server {
	s := &server{
		log:    logger,
		open:   make(map[*gust.Conn]wsInfo),
		wsTCP:  make(map[int64]int),
		reqTCP: make(map[int64]int),
		stats:  Stats{Closes: make(map[string]int)},
	}
	s.upgrader = &gust.Upgrader{
		Handler: echo{s},
		Options: gust.Options{
			Compression: gust.CompressionOptions{Enabled: true},
			Logger:      slog.New(slog.NewTextHandler(logger.Writer(), nil)),
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(page)
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/ws", s.serveWebSocket)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.Stats())
	})
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tcp, _ := r.Context().Value(tcpConnKey{}).(int64)
		s.mu.Lock()
		s.reqTCP[tcp]++
		s.mu.Unlock()
		if r.URL.Path != "/ws" {
			s.log.Printf("%s %s %s on TCP connection #%d", r.Proto, r.Method, r.URL.Path, tcp)
		}
		mux.ServeHTTP(w, r)
	})
	s.http = &http.Server{
		Handler:           logged,
		Protocols:         protocols,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          logger,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, tcpConnKey{}, s.tcpIDs.Add(1))
		},
	}
	return s
}

// serve serves HTTPS (HTTP/2 and HTTP/1.1) on ln until the server is shut
// down, counting the TCP connections it accepts.
func (s *server) serve(ln net.Listener) error {
	return s.http.ServeTLS(countingListener{ln, &s.tcpAccepted}, "", "")
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// serveWebSocket upgrades an HTTP/2 extended CONNECT or an HTTP/1.1
// Upgrade to a WebSocket and runs its read loop.
func (s *server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	c, err := s.upgrader.Upgrade(w, r)
	if err != nil {
		s.log.Printf("%s %s from %s: not a WebSocket: %v", r.Proto, r.Method, r.RemoteAddr, err)
		return // Upgrade has answered with the HTTP error
	}
	tcp, _ := r.Context().Value(tcpConnKey{}).(int64)
	info := wsInfo{id: s.wsIDs.Add(1), tcp: tcp, proto: r.Proto}
	s.mu.Lock()
	s.open[c] = info
	s.wsTCP[tcp]++
	s.stats.WebSockets++
	if r.ProtoMajor == 2 {
		s.stats.WebSocketsHTTP2++
	} else {
		s.stats.WebSocketsHTTP1++
	}
	if c.Compressed() {
		s.stats.Compressed++
	}
	s.mu.Unlock()
	how := "no compression"
	if c.Compressed() {
		how = "permessage-deflate"
	}
	s.log.Printf("websocket #%d open: %s %s on TCP connection #%d from %s, %s",
		info.id, r.Proto, r.Method, tcp, r.RemoteAddr, how)
	c.ReadLoop()
}

// Stats returns the counters.
func (s *server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.ExtendedConnect = extendedConnectEnabled()
	st.TCPAccepted = s.tcpAccepted.Load()
	st.TCPWithRequests = len(s.reqTCP)
	st.TCPWithWebSockets = len(s.wsTCP)
	st.WebSocketsOpen = len(s.open)
	st.Messages = s.messages.Load()
	st.Closes = make(map[string]int, len(s.stats.Closes))
	for k, v := range s.stats.Closes {
		st.Closes[k] = v
	}
	return st
}

// statsLine is Stats in one line, for the log.
func (s *server) statsLine() string {
	st := s.Stats()
	var closes []string
	for k, v := range st.Closes {
		closes = append(closes, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(closes)
	return fmt.Sprintf("%d TCP connections accepted, %d carried requests, %d WebSockets; %d WebSockets (%d HTTP/2, %d HTTP/1.1, "+
		"%d compressed, %d open), %d messages echoed, closes %v", st.TCPAccepted, st.TCPWithRequests, st.TCPWithWebSockets,
		st.WebSockets, st.WebSocketsHTTP2, st.WebSocketsHTTP1, st.Compressed, st.WebSocketsOpen, st.Messages, closes)
}

// closeAll starts the closing handshake of every open WebSocket with code
// and waits up to d for their read loops to end.
func (s *server) closeAll(code gust.StatusCode, reason string, d time.Duration) {
	s.mu.Lock()
	conns := make([]*gust.Conn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if err := c.Close(code, reason); err != nil {
			s.log.Printf("closing a WebSocket with %d: %v", code, err)
		}
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		n := len(s.open)
		s.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// echo writes every message back, with its opcode.
type echo struct {
	s *server
}

func (e echo) OnOpen(*gust.Conn) {}

func (e echo) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	if err := c.WriteMessage(m.Opcode, m.Data); err == nil {
		e.s.messages.Add(1)
	}
}

func (e echo) OnPing(c *gust.Conn, p []byte) { c.WritePong(p) }
func (e echo) OnPong(*gust.Conn, []byte)     {}

func (e echo) OnClose(c *gust.Conn, err error) {
	code := gust.CloseStatus(err)
	var pe *gust.ProtocolError
	switch {
	case code != 0:
	case errors.As(err, &pe):
		code = pe.Code
	default:
		code = gust.StatusAbnormalClosure
	}
	s := e.s
	s.mu.Lock()
	info := s.open[c]
	delete(s.open, c)
	s.stats.Closes[strconv.Itoa(int(code))]++
	s.mu.Unlock()
	s.log.Printf("websocket #%d closed: %d (%v)", info.id, code, err)
}
