// Package netdial opens the connection a WebSocket client's handshake runs
// over: the network connection, to the server or to a proxy, the proxy's
// tunnel (package proxy), then TLS for wss://, all bounded by the dial's
// context. The handshake itself is the caller's.
package netdial

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/gustws/gust/internal/handshake"
	"github.com/gustws/gust/internal/netpoll"
	"github.com/gustws/gust/internal/proxy"
)

// Dialer is how a client reaches a server.
type Dialer struct {
	// NetDial opens the network connection, to the server or to the proxy.
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Proxy returns the proxy for a request, or nil for none; a nil Proxy
	// means none.
	Proxy func(*http.Request) (*url.URL, error)
	// Header is the handshake request's header, which Proxy sees.
	Header http.Header
	// TLSConfig is copied for wss://; nil means the defaults.
	TLSConfig *tls.Config
	// HTTP2 offers h2 in TLS ALPN, for RFC 8441.
	HTTP2 bool
}

// Open opens the connection for the handshake to u (ws:// or wss://): nc,
// which the handshake runs over, and raw, the network connection under it
// (nc itself for a plain connection). ctx guards raw until release, which
// stops the guard and clears raw's deadline, or reports ctx's error when
// the guard fired. On error nothing stays open, and the error is Failed's.
func (d *Dialer) Open(ctx context.Context, u *url.URL) (nc, raw net.Conn, release func() error, err error) {
	raw, target, proxyURL, err := d.connect(ctx, u)
	if err != nil {
		return nil, nil, nil, Failed(ctx, err)
	}
	release = guard(ctx, raw)
	nc, err = d.transport(ctx, raw, u, target, proxyURL)
	if err != nil {
		raw.Close()
		release()
		return nil, nil, nil, Failed(ctx, err)
	}
	return nc, raw, release, nil
}

// connect opens the network connection: to the proxy, if one applies, or
// to the server. It returns the address of the server.
func (d *Dialer) connect(ctx context.Context, u *url.URL) (nc net.Conn, target string, proxyURL *url.URL, err error) {
	target = handshake.HostPort(u)
	if d.Proxy != nil {
		pu := *u
		pu.Scheme = "http"
		if u.Scheme == "wss" {
			pu.Scheme = "https"
		}
		req := &http.Request{Method: http.MethodGet, URL: &pu, Host: u.Host, Header: d.Header,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		proxyURL, err = d.Proxy(req.WithContext(ctx))
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
	nc, err = d.NetDial(ctx, "tcp", addr)
	if err != nil {
		return nil, "", nil, err
	}
	return nc, target, proxyURL, nil
}

// transport turns the network connection into the one the handshake runs
// over: through the proxy's tunnel, then TLS for wss://.
func (d *Dialer) transport(ctx context.Context, nc net.Conn, u *url.URL, target string, proxyURL *url.URL) (net.Conn, error) {
	if proxyURL != nil {
		var err error
		if nc, err = proxy.Tunnel(nc, proxyURL, target); err != nil {
			return nil, err
		}
	}
	if u.Scheme != "wss" {
		return nc, nil
	}
	cfg := d.TLSConfig.Clone() // nil for nil
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	// The handshake is HTTP/1.1 (RFC 6455), unless HTTP2 asks for RFC 8441.
	cfg.NextProtos = []string{"http/1.1"}
	if d.HTTP2 {
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

// Failed adds ctx's error when ctx ended the dial.
func Failed(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		// The only deadline on the connection is ctx's, and it just passed.
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}
