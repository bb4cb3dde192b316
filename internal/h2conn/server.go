// Package h2conn makes a net.Conn of a WebSocket carried on an HTTP/2
// stream (RFC 8441): on the server, over a handler's request body and
// ResponseWriter ([Accept]); on the client, over an extended CONNECT sent
// on a TLS connection that negotiated h2 ([Connect]). It knows nothing of
// WebSocket frames: the streams carry bytes.
package h2conn

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Accept answers an extended CONNECT with 200 and the fields set on w's
// header, flushes the answer, and returns the stream the handler then
// holds: reads come from the request body, writes go to w, each flushed,
// so that a write leaves in as few DATA frames as flow control allows. The
// stream ends when the handler returns. The error is the flush's.
func Accept(w http.ResponseWriter, r *http.Request) (*ServerStream, error) {
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return nil, err
	}
	rc.EnableFullDuplex() // HTTP/2 streams are full duplex already; harmless there
	s := &ServerStream{body: r.Body, w: w, rc: rc, local: Addr("local"), remote: Addr(r.RemoteAddr)}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		s.local = la
	}
	return s, nil
}

// ServerStream is a net.Conn over one HTTP/2 stream of a handler. Writes
// come one at a time; Close may come from any goroutine while a write
// waits for flow control, and must not wait for it: it then sets a write
// deadline in the past, which ends the write (and resets the stream, which
// is what cutting a connection means).
type ServerStream struct {
	body   io.ReadCloser
	w      io.Writer
	rc     *http.ResponseController
	local  net.Addr
	remote net.Addr

	closed  atomic.Bool
	writing atomic.Bool
	// mu orders the deadline setters against Close: once the handler has
	// returned, net/http's ResponseController must not be used, and Close
	// comes before the handler returns.
	mu sync.Mutex
}

func (s *ServerStream) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if err != nil && n == 0 && s.closed.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// Write writes p and flushes it. The caller must not write once the
// handler has returned (gust's Conn takes its write lock after Close, so
// that no Write is running by then).
func (s *ServerStream) Write(p []byte) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	s.writing.Store(true)
	defer s.writing.Store(false)
	n, err := s.w.Write(p)
	if err == nil {
		err = s.rc.Flush()
	}
	return n, err
}

// Close stops writes and reads on the stream; the stream itself ends when
// the handler returns.
func (s *ServerStream) Close() error {
	s.mu.Lock()
	if !s.closed.CompareAndSwap(false, true) {
		s.mu.Unlock()
		return net.ErrClosed
	}
	if s.writing.Load() {
		s.rc.SetWriteDeadline(time.Unix(1, 0)) // ends the write waiting for the peer's window
	}
	s.mu.Unlock()
	return s.body.Close()
}

// Delivered says that the stream delivers what was written before it
// ends: a connection that failed need not linger for the peer to read its
// close frame, as it does on TCP, where closing with unread bytes resets.
func (s *ServerStream) Delivered() {}

func (s *ServerStream) LocalAddr() net.Addr  { return s.local }
func (s *ServerStream) RemoteAddr() net.Addr { return s.remote }

func (s *ServerStream) SetDeadline(t time.Time) error {
	return errors.Join(s.SetReadDeadline(t), s.SetWriteDeadline(t))
}

// SetReadDeadline and SetWriteDeadline return net.ErrClosed once the
// stream is closed: a Close racing with the end of the handler (the peer's
// answer ends it) must not reach net/http's ResponseController after the
// handler returned.
func (s *ServerStream) SetReadDeadline(t time.Time) error {
	return s.setDeadline(s.rc.SetReadDeadline, t)
}

func (s *ServerStream) SetWriteDeadline(t time.Time) error {
	return s.setDeadline(s.rc.SetWriteDeadline, t)
}

func (s *ServerStream) setDeadline(set func(time.Time) error, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	return set(t)
}

// Addr is an address as net/http reports it: the peer's of a request is a
// string.
type Addr string

func (a Addr) Network() string { return "tcp" }
func (a Addr) String() string  { return string(a) }
