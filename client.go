package gust

import (
	"bufio"
	"bytes"
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
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/h2conn"
	"github.com/gustws/gust/internal/handshake"
	"github.com/gustws/gust/internal/netpoll"
	"github.com/gustws/gust/internal/proxy"
)

// DialOptions configures [Dial]. The zero value is valid, and a nil
// *DialOptions means the zero value.
type DialOptions struct {
	// Options configures the connection.
	Options Options

	// Subprotocols lists the subprotocols offered, in order of preference
	// (Sec-WebSocket-Protocol); the server selects one (Conn.Subprotocol)
	// or none. Default none.
	Subprotocols []string

	// Header is added to the handshake request: Origin, Cookie,
	// Authorization, User-Agent and so on; a Host entry replaces the URL's
	// host in the Host header. The WebSocket headers themselves (Upgrade,
	// Connection, Sec-WebSocket-*) come from the other options and may not
	// be set here. Default none.
	Header http.Header

	// HandshakeTimeout bounds the whole of Dial: connect, proxy, TLS and
	// the WebSocket handshake, on top of Dial's context. Default 10s.
	HandshakeTimeout time.Duration

	// MaxHeaderBytes bounds the size of the handshake response head.
	// Default 16 KiB.
	MaxHeaderBytes int

	// TLSConfig is used for wss:// URLs (a copy: ServerName defaults to
	// the URL's host, and NextProtos is set by Dial). Default nil: the
	// system roots.
	TLSConfig *tls.Config

	// NetDialContext opens the network connection, to the server or to the
	// proxy. It may return a connection it already holds (a unix socket, an
	// in-memory pipe, a custom transport): Dial then runs the handshake
	// over it, with TLS first for a wss:// URL. Default: a net.Dialer's
	// DialContext.
	NetDialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// Proxy returns the proxy to go through for a request, or nil for none;
	// http://, socks5:// and socks5h:// proxies are supported, with the
	// credentials of the proxy URL's userinfo (Basic for HTTP CONNECT,
	// RFC 1929 for SOCKS5). The request's URL has the scheme http for
	// ws:// and https for wss://, so [http.ProxyFromEnvironment] picks
	// HTTP_PROXY or HTTPS_PROXY and honours NO_PROXY (it never proxies
	// localhost or loopback addresses). Default nil: no proxy.
	Proxy func(*http.Request) (*url.URL, error)

	// HTTP2 lets Dial open a wss:// WebSocket as an HTTP/2 stream (RFC
	// 8441): the TLS handshake offers h2, and when the server picks it and
	// announces SETTINGS_ENABLE_CONNECT_PROTOCOL, the handshake is an
	// extended CONNECT. When the server does not pick h2, Dial falls back
	// to HTTP/1.1 on the same connection; when it does not allow extended
	// CONNECT, or answers it with a Content-Length (which RFC 9110 §9.3.6
	// forbids, and which net/http's HTTP/2 client would hold the stream
	// to), Dial falls back to HTTP/1.1 on a new connection. Each Dial uses
	// its own TCP connection. Default false: HTTP/1.1 only.
	HTTP2 bool
}

// maxRefusalBody is how much of a refusal's body a HandshakeError keeps.
const maxRefusalBody = 1 << 10

// Dial opens a WebSocket connection to rawURL (ws:// or wss://) and
// returns it with the server's handshake response; the caller then runs
// its ReadLoop, which reports to h (nil means a BuiltinEventHandler). The
// Conn is the same type a server gets, with masked writes.
//
// ctx bounds the connect, the proxy and TLS handshakes and the WebSocket
// handshake, together with opts.HandshakeTimeout (default 10s); once Dial
// has returned, ctx no longer matters. Redirects are not followed.
//
// Every error is a *HandshakeError. When the server answered, the response is
// returned too, its Body holding the first bytes of the server's (the
// connection is closed); it is nil when no response was read.
func Dial(ctx context.Context, rawURL string, h Event, opts *DialOptions) (*Conn, *http.Response, error) {
	c, resp, err := dial(ctx, rawURL, h, opts)
	if opts != nil && opts.Options.Metrics != nil {
		opts.Options.Metrics.Handshake(dialStatus(c, resp))
	}
	if err != nil {
		return nil, resp, dialError(rawURL, resp, err)
	}
	return c, resp, nil
}

// dialError makes err a *HandshakeError, unless it is one.
func dialError(rawURL string, resp *http.Response, err error) error {
	var de *HandshakeError
	if errors.As(err, &de) {
		return de
	}
	de = &HandshakeError{URL: rawURL, Err: err}
	if u, perr := url.Parse(rawURL); perr == nil {
		de.URL = u.Redacted()
	}
	if resp != nil {
		de.Status, de.Header = resp.StatusCode, resp.Header
	}
	return de
}

func dial(ctx context.Context, rawURL string, h Event, opts *DialOptions) (*Conn, *http.Response, error) {
	d, err := newDialer(opts)
	if err != nil {
		return nil, nil, err
	}
	u, err := handshake.ParseURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("gust: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.HandshakeTimeout)
	defer cancel()

	raw, target, proxyURL, err := d.connect(ctx, u)
	if err != nil {
		return nil, nil, dialFailed(ctx, err)
	}
	release := guard(ctx, raw)
	nc, err := d.transport(ctx, raw, u, target, proxyURL)
	if err != nil {
		raw.Close()
		release()
		return nil, nil, dialFailed(ctx, err)
	}
	if tc, ok := nc.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == "h2" {
		c, resp, err := d.handshakeH2(ctx, tc, u, h, release)
		if errors.Is(err, errTryHTTP1) { // the server speaks h2, but not RFC 8441 as net/http needs
			opts2 := *opts
			opts2.HTTP2 = false
			return dial(ctx, rawURL, h, &opts2)
		}
		return c, resp, err
	}
	return d.handshake(ctx, nc, raw, u, h, release)
}

// dialer is DialOptions checked, with the defaults filled in.
type dialer struct {
	cfg      *config
	header   http.Header
	host     string // a Host header from DialOptions.Header, or ""
	netDial  func(ctx context.Context, network, addr string) (net.Conn, error)
	proxy    func(*http.Request) (*url.URL, error)
	offer    string // Sec-WebSocket-Extensions, or ""
	protocol string // Sec-WebSocket-Protocol, or ""
	http2    bool   // offer h2 in TLS ALPN and try RFC 8441
}

func newDialer(opts *DialOptions) (*dialer, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	d := &dialer{cfg: newConfig(opts.Options, false), netDial: opts.NetDialContext, proxy: opts.Proxy, http2: opts.HTTP2}
	d.cfg.withHandshake(opts.HandshakeTimeout, opts.MaxHeaderBytes)
	d.cfg.Subprotocols, d.cfg.TLSConfig = opts.Subprotocols, opts.TLSConfig
	if d.netDial == nil {
		d.netDial = (&net.Dialer{}).DialContext
	}
	d.header = make(http.Header, len(opts.Header))
	for name, values := range opts.Header {
		if !handshake.ValidFieldName(name) {
			return nil, fmt.Errorf("gust: invalid request header name %q", name)
		}
		key := http.CanonicalHeaderKey(name)
		if handshake.ClientOwn(key) {
			return nil, fmt.Errorf("gust: request header %s is set by the handshake itself; use DialOptions.Subprotocols and Options.Compression", key)
		}
		if key == "Host" {
			if len(values) != 1 || values[0] == "" || strings.ContainsAny(values[0], "\r\n\x00 ") {
				return nil, fmt.Errorf("gust: invalid Host header %q", values)
			}
			d.host = values[0]
			continue
		}
		d.header[key] = append(d.header[key], values...)
	}
	for _, p := range d.cfg.Subprotocols {
		if !handshake.IsToken(p) {
			return nil, fmt.Errorf("gust: invalid subprotocol %q: it must be an HTTP token", p)
		}
	}
	d.protocol = strings.Join(d.cfg.Subprotocols, ", ")
	if d.cfg.deflate.Enabled {
		d.offer = deflate.Offer(&d.cfg.deflate)
	}
	return d, nil
}

// connect opens the network connection: to the proxy, if one applies, or
// to the server. It returns the address of the server.
func (d *dialer) connect(ctx context.Context, u *url.URL) (nc net.Conn, target string, proxyURL *url.URL, err error) {
	target = handshake.HostPort(u)
	if d.proxy != nil {
		pu := *u
		pu.Scheme = "http"
		if u.Scheme == "wss" {
			pu.Scheme = "https"
		}
		req := &http.Request{Method: http.MethodGet, URL: &pu, Host: u.Host, Header: d.header,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		proxyURL, err = d.proxy(req.WithContext(ctx))
		if err != nil {
			return nil, "", nil, fmt.Errorf("choosing a proxy: %w", err)
		}
	}
	addr := target
	if proxyURL != nil {
		if addr, err = proxy.Addr(proxyURL); err != nil {
			return nil, "", nil, err
		}
	}
	nc, err = d.netDial(ctx, "tcp", addr)
	if err != nil {
		return nil, "", nil, err
	}
	return nc, target, proxyURL, nil
}

// transport turns the network connection into the one the handshake runs
// over: through the proxy's tunnel, then TLS for wss://.
func (d *dialer) transport(ctx context.Context, nc net.Conn, u *url.URL, target string, proxyURL *url.URL) (net.Conn, error) {
	if proxyURL != nil {
		var err error
		if nc, err = proxy.Tunnel(nc, proxyURL, target); err != nil {
			return nil, err
		}
	}
	if u.Scheme != "wss" {
		return nc, nil
	}
	cfg := d.cfg.TLSConfig.Clone() // nil for nil
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	// The handshake is HTTP/1.1 (RFC 6455), unless HTTP2 asks for RFC 8441.
	cfg.NextProtos = []string{"http/1.1"}
	if d.http2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	// Over an Under, which the event loops can move to their socket, and
	// which follows the records, for MessageTimeout.
	tc := tls.Client(netpoll.Wrap(nc), cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// guard bounds I/O on nc by ctx: it sets ctx's deadline on nc and closes
// nc if ctx is done first. The function it returns stops the guard and
// clears the deadline, or reports ctx's error when the guard fired.
func guard(ctx context.Context, nc net.Conn) func() error {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	return func() error {
		if !stop() {
			return ctx.Err()
		}
		nc.SetDeadline(time.Time{})
		return nil
	}
}

// dialFailed adds ctx's error when ctx ended the dial.
func dialFailed(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		// The only deadline on the connection is ctx's, and it just passed.
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// handshake sends the request over nc and reads the response. raw is the
// network connection under nc (the same for a plain connection); release
// ends the context guard on it.
func (d *dialer) handshake(ctx context.Context, nc, raw net.Conn, u *url.URL, h Event, release func() error) (*Conn, *http.Response, error) {
	fail := func(resp *http.Response, err error) (*Conn, *http.Response, error) {
		nc.Close()
		raw.Close()
		release()
		return nil, resp, dialFailed(ctx, err)
	}
	key := handshake.NewKey()
	req := handshake.ClientRequest(u, d.host, handshake.ClientFields(d.header, d.protocol, d.offer), key)
	var buf bytes.Buffer
	handshake.WriteRequest(&buf, req)
	if _, err := nc.Write(buf.Bytes()); err != nil {
		return fail(nil, err)
	}

	// Read the head through a limit, so that a server cannot feed an
	// endless header; the bytes bufio reads past the head are kept.
	lr := &io.LimitedReader{R: nc, N: int64(d.cfg.MaxHeaderBytes)}
	br := bufio.NewReaderSize(lr, 4096)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		if lr.N == 0 {
			err = fmt.Errorf("response head over %d bytes", d.cfg.MaxHeaderBytes)
		}
		return fail(nil, fmt.Errorf("reading the handshake response: %w", err))
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		lr.N = maxRefusalBody
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return fail(resp, &HandshakeError{URL: u.Redacted(), Status: resp.StatusCode, Header: resp.Header, Body: body})
	}
	if err := handshake.CheckResponse(resp.Header, key); err != nil {
		return fail(resp, err)
	}
	subprotocol, params, err := d.checkNegotiated(resp.Header)
	if err != nil {
		return fail(resp, err)
	}
	if err := release(); err != nil {
		return fail(resp, err)
	}
	var buffered []byte
	if n := br.Buffered(); n > 0 {
		buffered, _ = br.Peek(n)
	}
	return d.newConn(nc, h, buffered, subprotocol, params), resp, nil
}

// newConn makes the client's Conn once the handshake has accepted it.
func (d *dialer) newConn(nc net.Conn, h Event, buffered []byte, subprotocol string, params *deflate.Params) *Conn {
	if h == nil {
		h = BuiltinEventHandler{}
	}
	c := newConn(nc, d.cfg, h, false, buffered, subprotocol)
	if params != nil {
		c.deflate = deflate.NewState(*params, &d.cfg.deflate, false, &c.wr.mu)
	}
	return c
}

// handshakeH2 opens the WebSocket as an extended CONNECT stream on tc (RFC
// 8441 §4); the error wraps errTryHTTP1 when HTTP/1.1 should be tried.
func (d *dialer) handshakeH2(ctx context.Context, tc *tls.Conn, u *url.URL, h Event, release func() error) (*Conn, *http.Response, error) {
	if err := release(); err != nil {
		tc.Close()
		return nil, nil, dialFailed(ctx, err)
	}
	fields := handshake.ClientFields(d.header, d.protocol, d.offer)
	s, resp, err := h2conn.Connect(ctx, tc, u, d.host, fields)
	if errors.Is(err, h2conn.ErrNoExtendedConnect) || errors.Is(err, h2conn.ErrContentLength) {
		return nil, nil, fmt.Errorf("%w: %w", errTryHTTP1, err)
	}
	if err == nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		err = &HandshakeError{URL: u.Redacted(), Status: resp.StatusCode, Header: resp.Header, Body: body}
	}
	var subprotocol string
	var params *deflate.Params
	if err == nil {
		subprotocol, params, err = d.checkNegotiated(resp.Header)
	}
	if err != nil {
		if s != nil {
			s.Close()
		}
		return nil, resp, dialFailed(ctx, err)
	}
	return d.newConn(s, h, nil, subprotocol, params), resp, nil
}

// checkNegotiated settles the subprotocol and the permessage-deflate
// parameters of an accepting response, over HTTP/1.1 or HTTP/2.
func (d *dialer) checkNegotiated(h http.Header) (subprotocol string, params *deflate.Params, err error) {
	if subprotocol, err = handshake.CheckSubprotocol(h, d.cfg.Subprotocols); err == nil {
		params, err = deflate.Accept(h, &d.cfg.deflate)
	}
	return subprotocol, params, err
}
