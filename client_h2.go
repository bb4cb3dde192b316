package gust

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"crypto/tls"

	"github.com/gustws/gust/internal/deflate"
)

// handshakeH2 opens the WebSocket as an extended CONNECT stream on tc, a
// TLS connection that negotiated h2 (RFC 8441 §4).
//
// net/http's Transport refuses the :protocol pseudo-header an extended
// CONNECT needs; the HTTP/2 transport it hands TLS connections to through
// TLSNextProto["h2"] sends it, and waits for the server's SETTINGS to see
// whether extended CONNECT is allowed.
//
// When the server does not allow extended CONNECT, or answers it with a
// Content-Length, the error wraps errTryHTTP1.
func (d *dialer) handshakeH2(ctx context.Context, tc *tls.Conn, u *url.URL, h Event, release func() error) (*Conn, *http.Response, error) {
	if err := release(); err != nil {
		tc.Close()
		return nil, nil, dialFailed(ctx, err)
	}
	// DisableCompression: the transport must not ask for gzip, and so never
	// try to gunzip the stream, whatever the server answers.
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{}, DisableCompression: true}
	tr.CloseIdleConnections() // sets up TLSNextProto
	next := tr.TLSNextProto["h2"]
	if next == nil {
		tc.Close()
		return nil, nil, errNoExtendedConnect
	}
	rt := next(u.Host, tc)

	// The stream lives as long as the Conn, not as long as Dial's ctx.
	streamCtx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // until the handshake is done
	pr, pw := io.Pipe()
	hu := *u
	hu.Scheme = "https"
	req, err := http.NewRequestWithContext(streamCtx, http.MethodConnect, hu.String(), pr)
	if err != nil {
		cancel()
		tc.Close()
		return nil, nil, err
	}
	if d.host != "" {
		req.Host = d.host
	}
	for k, v := range d.header {
		req.Header[k] = v
	}
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	if d.protocol != "" {
		req.Header.Set("Sec-WebSocket-Protocol", d.protocol)
	}
	if d.offer != "" {
		req.Header.Set("Sec-WebSocket-Extensions", d.offer)
	}
	fail := func(resp *http.Response, err error) (*Conn, *http.Response, error) {
		cancel()
		pw.Close()
		tc.Close()
		if errors.Is(err, errTryHTTP1) {
			return nil, resp, err
		}
		return nil, resp, dialFailed(ctx, err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		// net/http exports no error for this; its message is
		// "net/http: extended connect not supported by peer", which
		// TestDialH2FallsBackWithoutExtendedConnect guards.
		if strings.Contains(err.Error(), "extended connect not supported") {
			return fail(nil, errNoExtendedConnect)
		}
		return fail(nil, err)
	}
	if !stop() && ctx.Err() != nil {
		resp.Body.Close()
		return fail(nil, ctx.Err())
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		resp.Body.Close()
		return fail(resp, &HandshakeError{URL: u.Redacted(), Status: resp.StatusCode, Header: resp.Header, Body: body})
	}
	if resp.ContentLength >= 0 && len(resp.Header["Content-Length"]) > 0 {
		// The transport took the header as the body's length and will
		// fail the stream past it (with no header, or one it cannot
		// parse, ContentLength is -1).
		resp.Body.Close()
		return fail(nil, errConnectContentLength)
	}
	subprotocol, params, err := d.checkNegotiated(resp.Header)
	if err != nil {
		resp.Body.Close()
		return fail(resp, err)
	}
	if h == nil {
		h = BuiltinEventHandler{}
	}
	s := &h2ClientConn{body: resp.Body, pw: pw, tc: tc, cancel: cancel}
	c := newConn(s, d.cfg, h, false, nil, subprotocol)
	if params != nil {
		c.deflate = deflate.NewState(*params, &d.cfg.deflate, false, &c.wr.mu)
	}
	return c, resp, nil
}

// h2ClientConn is a net.Conn over the client side of an extended CONNECT
// stream: reads from the response body, writes into the request body. The
// TCP connection carries this stream only, so deadlines are set on it.
type h2ClientConn struct {
	body   io.ReadCloser
	pw     *io.PipeWriter
	tc     *tls.Conn
	cancel context.CancelFunc
	once   sync.Once

	// A write waits in the pipe until the transport takes it, which flow
	// control may put off for ever: the write deadline is a timer that
	// breaks the pipe when it fires during a write.
	wmu      sync.Mutex
	deadline time.Time
	timer    *time.Timer
	writing  atomic.Bool
}

func (s *h2ClientConn) Read(p []byte) (int, error) { return s.body.Read(p) }

func (s *h2ClientConn) Write(p []byte) (int, error) {
	s.wmu.Lock()
	expired := !s.deadline.IsZero() && !time.Now().Before(s.deadline)
	s.wmu.Unlock()
	if expired {
		return 0, os.ErrDeadlineExceeded
	}
	s.writing.Store(true)
	n, err := s.pw.Write(p)
	s.writing.Store(false)
	return n, err
}

// writeExpired is the write deadline's timer.
func (s *h2ClientConn) writeExpired() {
	if s.writing.Load() {
		s.pw.CloseWithError(os.ErrDeadlineExceeded)
	}
}

func (s *h2ClientConn) SetWriteDeadline(t time.Time) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.deadline = t
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !t.IsZero() {
		s.timer = time.AfterFunc(time.Until(t), s.writeExpired)
	}
	return nil
}

// Close ends the request body (END_STREAM), resets the stream and closes
// the TCP connection.
func (s *h2ClientConn) Close() error {
	err := net.ErrClosed
	s.once.Do(func() {
		s.pw.Close()
		s.cancel()
		s.wmu.Lock()
		if s.timer != nil {
			s.timer.Stop()
		}
		s.wmu.Unlock()
		s.body.Close()
		err = s.tc.Close()
	})
	return err
}

func (s *h2ClientConn) LocalAddr() net.Addr  { return s.tc.LocalAddr() }
func (s *h2ClientConn) RemoteAddr() net.Addr { return s.tc.RemoteAddr() }
func (s *h2ClientConn) SetDeadline(t time.Time) error {
	return errors.Join(s.SetReadDeadline(t), s.SetWriteDeadline(t))
}
func (s *h2ClientConn) SetReadDeadline(t time.Time) error { return s.tc.SetReadDeadline(t) }

// String names the stream in errors.
func (s *h2ClientConn) String() string {
	return fmt.Sprintf("HTTP/2 WebSocket stream to %v", s.tc.RemoteAddr())
}
