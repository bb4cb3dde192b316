package gust

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/h2conn"
	"github.com/gustws/gust/internal/handshake"
	"github.com/gustws/gust/internal/netdial"
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

	nc, raw, release, err := d.net.Open(ctx, u)
	if err != nil {
		return nil, nil, err
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
	net      netdial.Dialer // its Header is the handshake's, without Host
	host     string         // a Host header from DialOptions.Header, or ""
	offer    string         // Sec-WebSocket-Extensions, or ""
	protocol string         // Sec-WebSocket-Protocol, or ""
}

func newDialer(opts *DialOptions) (*dialer, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	d := &dialer{cfg: newConfig(opts.Options, false), net: netdial.Dialer{NetDial: opts.NetDialContext,
		Proxy: opts.Proxy, TLSConfig: opts.TLSConfig, HTTP2: opts.HTTP2}}
	d.cfg.withHandshake(opts.HandshakeTimeout, opts.MaxHeaderBytes)
	d.cfg.Subprotocols, d.cfg.TLSConfig = opts.Subprotocols, opts.TLSConfig
	if d.net.NetDial == nil {
		d.net.NetDial = (&net.Dialer{}).DialContext
	}
	var err error
	if d.net.Header, d.host, err = handshake.ClientHeader(opts.Header); err != nil {
		return nil, fmt.Errorf("gust: %w", err)
	}
	if d.protocol, err = handshake.SubprotocolOffer(d.cfg.Subprotocols); err != nil {
		return nil, fmt.Errorf("gust: %w", err)
	}
	if d.cfg.deflate.Enabled {
		d.offer = deflate.Offer(&d.cfg.deflate)
	}
	return d, nil
}

// handshake sends the request over nc and reads the response. raw is the
// network connection under nc (the same for a plain connection); release
// ends the context guard on it.
func (d *dialer) handshake(ctx context.Context, nc, raw net.Conn, u *url.URL, h Event, release func() error) (*Conn, *http.Response, error) {
	fail := func(resp *http.Response, err error) (*Conn, *http.Response, error) {
		nc.Close()
		raw.Close()
		release()
		return nil, resp, netdial.Failed(ctx, err)
	}
	key := handshake.NewKey()
	req := handshake.ClientRequest(u, d.host, handshake.ClientFields(d.net.Header, d.protocol, d.offer), key)
	var buf bytes.Buffer
	handshake.WriteRequest(&buf, req)
	if _, err := nc.Write(buf.Bytes()); err != nil {
		return fail(nil, err)
	}

	resp, rest, err := handshake.ReadResponse(nc, req, d.cfg.MaxHeaderBytes, maxRefusalBody)
	if err != nil {
		return fail(nil, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fail(resp, &HandshakeError{URL: u.Redacted(), Status: resp.StatusCode, Header: resp.Header, Body: rest})
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
	return d.newConn(nc, h, rest, subprotocol, params), resp, nil
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
		return nil, nil, netdial.Failed(ctx, err)
	}
	fields := handshake.ClientFields(d.net.Header, d.protocol, d.offer)
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
		return nil, resp, netdial.Failed(ctx, err)
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
