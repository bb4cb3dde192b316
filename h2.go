package gust

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// upgradeH2 answers an RFC 8441 extended CONNECT with 200 and makes a Conn
// of the HTTP/2 stream: frames are read from the request body and written
// to the ResponseWriter, flushed once per corked batch so that a batch
// leaves in as few DATA frames as flow control allows.
//
// The response carries the fields set on w before Upgrade, then
// ResponseHeader's and extra's (OnRequest's), except those the handshake
// sets itself; accept has checked them all.
func (u *Upgrader) upgradeH2(w http.ResponseWriter, r *http.Request, cfg *config, c *Conn, hs handshakeResult, extra http.Header) (*Conn, error) {
	h := w.Header()
	for k := range h {
		if responseOwn(k) {
			delete(h, k)
		}
	}
	if hs.subprotocol != "" {
		h.Set("Sec-WebSocket-Protocol", hs.subprotocol)
	}
	if hs.deflate != nil {
		h.Set("Sec-WebSocket-Extensions", hs.deflate.String())
	}
	for _, fields := range [...]http.Header{cfg.ResponseHeader, extra} {
		for k, v := range fields {
			if !responseOwn(k) {
				h[k] = append(h[k], v...)
			}
		}
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return nil, fmt.Errorf("gust: flushing the HTTP/2 handshake response: %w", err)
	}
	rc.EnableFullDuplex() // HTTP/2 streams are full duplex already; harmless there
	s := &h2Stream{body: r.Body, w: w, rc: rc, local: h2Addr("local"), remote: h2Addr(r.RemoteAddr)}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		s.local = la
	}
	c.open(s, nil, hs)
	return c, nil
}

// h2Stream is a net.Conn over one HTTP/2 stream of a handler. Writes come
// one at a time, under the Conn's write lock; Close may come from any
// goroutine while a write waits for flow control, and must not wait for
// it: it then sets a write deadline in the past, which ends the write (and
// resets the stream, which is what cutting a connection means).
type h2Stream struct {
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

func (s *h2Stream) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if err != nil && n == 0 && s.closed.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// Write writes p and flushes it. The Conn's finish takes the write lock
// after Close, so no Write is running once the handler returns.
func (s *h2Stream) Write(p []byte) (int, error) {
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
func (s *h2Stream) Close() error {
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

// delivered tells failAndLinger that the stream delivers what was written
// before it ends: a failed connection need not linger.
func (s *h2Stream) delivered() {}

func (s *h2Stream) LocalAddr() net.Addr  { return s.local }
func (s *h2Stream) RemoteAddr() net.Addr { return s.remote }

func (s *h2Stream) SetDeadline(t time.Time) error {
	return errors.Join(s.SetReadDeadline(t), s.SetWriteDeadline(t))
}

// SetReadDeadline and SetWriteDeadline return net.ErrClosed once the
// stream is closed: a Close on the Conn racing with the end of the handler
// (the peer's answer ends it) must not reach net/http's ResponseController
// after the handler returned.
func (s *h2Stream) SetReadDeadline(t time.Time) error {
	return s.setDeadline(s.rc.SetReadDeadline, t)
}

func (s *h2Stream) SetWriteDeadline(t time.Time) error {
	return s.setDeadline(s.rc.SetWriteDeadline, t)
}

func (s *h2Stream) setDeadline(set func(time.Time) error, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	return set(t)
}

// h2Addr is the peer's address as net/http reports it.
type h2Addr string

func (a h2Addr) Network() string { return "tcp" }
func (a h2Addr) String() string  { return string(a) }
