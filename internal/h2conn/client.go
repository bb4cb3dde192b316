package h2conn

import (
	"context"
	"crypto/tls"
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
)

// The answers of an HTTP/2 server after which a client may still open the
// WebSocket over HTTP/1.1, on a new connection.
var (
	// ErrNoExtendedConnect reports a server that did not announce
	// SETTINGS_ENABLE_CONNECT_PROTOCOL.
	ErrNoExtendedConnect = errors.New("it does not allow extended CONNECT")

	// ErrContentLength reports a server that sent a Content-Length on its
	// 2xx answer to the extended CONNECT, which RFC 9110 §9.3.6 forbids.
	// The RFC tells clients to ignore it, but net/http's HTTP/2 transport
	// ends the stream with an error once that many bytes have come, and
	// has no setting to make it ignore the header.
	ErrContentLength = errors.New("it sent Content-Length on its answer to CONNECT")
)

// Connect sends an extended CONNECT for u with :protocol websocket and the
// fields of header (RFC 8441 §4) on tc, a TLS connection that negotiated
// h2, and returns the stream with the server's answer, whatever its
// status. host, if not "", is the :authority instead of u's host. ctx
// bounds the wait for the answer; the stream lasts until its Close, which
// also closes tc. On an error, tc is closed.
//
// net/http's Transport refuses the :protocol pseudo-header an extended
// CONNECT needs; the HTTP/2 transport it hands TLS connections to through
// TLSNextProto["h2"] sends it, and waits for the server's SETTINGS to see
// whether extended CONNECT is allowed.
func Connect(ctx context.Context, tc *tls.Conn, u *url.URL, host string, header http.Header) (*ClientStream, *http.Response, error) {
	// DisableCompression: the transport must not ask for gzip, and so never
	// try to gunzip the stream, whatever the server answers.
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{}, DisableCompression: true}
	tr.CloseIdleConnections() // sets up TLSNextProto
	next := tr.TLSNextProto["h2"]
	if next == nil {
		tc.Close()
		return nil, nil, ErrNoExtendedConnect
	}
	rt := next(u.Host, tc)

	// The stream lives as long as the Conn, not as long as ctx.
	streamCtx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // until the answer has come
	pr, pw := io.Pipe()
	fail := func(err error) (*ClientStream, *http.Response, error) {
		cancel()
		pw.Close()
		tc.Close()
		return nil, nil, err
	}
	hu := *u
	hu.Scheme = "https"
	req, err := http.NewRequestWithContext(streamCtx, http.MethodConnect, hu.String(), pr)
	if err != nil {
		return fail(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set(":protocol", "websocket")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		// net/http exports no error for this; its message is
		// "net/http: extended connect not supported by peer", which
		// gust's TestDialH2FallsBackWithoutExtendedConnect guards.
		if strings.Contains(err.Error(), "extended connect not supported") {
			return fail(ErrNoExtendedConnect)
		}
		return fail(err)
	}
	if !stop() && ctx.Err() != nil {
		resp.Body.Close()
		return fail(ctx.Err())
	}
	if resp.StatusCode/100 == 2 && resp.ContentLength >= 0 && len(resp.Header["Content-Length"]) > 0 {
		// The transport took the header as the body's length and will
		// fail the stream past it (with no header, or one it cannot
		// parse, ContentLength is -1).
		resp.Body.Close()
		return fail(ErrContentLength)
	}
	return &ClientStream{body: resp.Body, pw: pw, tc: tc, cancel: cancel}, resp, nil
}

// ClientStream is a net.Conn over the client side of an extended CONNECT
// stream: reads from the response body, writes into the request body. The
// TCP connection carries this stream only, so deadlines are set on it.
type ClientStream struct {
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

func (s *ClientStream) Read(p []byte) (int, error) { return s.body.Read(p) }

func (s *ClientStream) Write(p []byte) (int, error) {
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
func (s *ClientStream) writeExpired() {
	if s.writing.Load() {
		s.pw.CloseWithError(os.ErrDeadlineExceeded)
	}
}

func (s *ClientStream) SetWriteDeadline(t time.Time) error {
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
func (s *ClientStream) Close() error {
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

func (s *ClientStream) LocalAddr() net.Addr  { return s.tc.LocalAddr() }
func (s *ClientStream) RemoteAddr() net.Addr { return s.tc.RemoteAddr() }
func (s *ClientStream) SetDeadline(t time.Time) error {
	return errors.Join(s.SetReadDeadline(t), s.SetWriteDeadline(t))
}
func (s *ClientStream) SetReadDeadline(t time.Time) error { return s.tc.SetReadDeadline(t) }

// String names the stream in errors.
func (s *ClientStream) String() string {
	return fmt.Sprintf("HTTP/2 WebSocket stream to %v", s.tc.RemoteAddr())
}
