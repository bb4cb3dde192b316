// Package handoff hands connections a Server has begun reading over to an
// http.Server: [Conn] puts the bytes already read back in front of a
// net.Conn, [Listener] is the net.Listener through which they reach
// http.Server.Serve, and [ConnContext] with [WithTLSState] give the
// requests the TLS state net/http cannot see through the Conn. It knows
// nothing of WebSockets.
package handoff

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
)

// Conn is a net.Conn whose reads return the bytes the Server had already
// read from it (Ahead), then what follows.
type Conn struct {
	net.Conn
	Ahead []byte
}

// NewConn returns nc with a copy of ahead put back in front.
func NewConn(nc net.Conn, ahead []byte) *Conn {
	return &Conn{Conn: nc, Ahead: append([]byte(nil), ahead...)}
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(c.Ahead) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.Ahead)
	c.Ahead = c.Ahead[n:]
	if len(c.Ahead) == 0 {
		c.Ahead = nil // let the copy go
	}
	return n, nil
}

// CloseWrite half-closes the connection when the one underneath can, as
// net/http does before closing, so that the client reads the response.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Listener is the net.Listener through which a Server hands connections to
// its net/http server, until Close.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener returns a Listener with no connections yet.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Hand passes nc to Accept, or closes it once the listener is closed.
func (l *Listener) Hand(nc net.Conn) {
	select {
	case l.conns <- nc:
	case <-l.done:
		nc.Close()
	}
}

func (l *Listener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns a placeholder: the connections come from the Server's
// listeners.
func (l *Listener) Addr() net.Addr { return addr{} }

type addr struct{}

func (addr) Network() string { return "gust" }
func (addr) String() string  { return "gust.Server" }

// tlsStateKey is the context key under which ConnContext keeps the TLS
// state of a handed-over connection, for the requests' r.TLS.
type tlsStateKey struct{}

// ConnContext, an http.Server's, keeps the TLS state of a connection that
// came over TLS, which net/http cannot see through the Conn around it.
func ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if rc, ok := nc.(*Conn); ok {
		if tc, ok := rc.Conn.(*tls.Conn); ok {
			st := tc.ConnectionState()
			return context.WithValue(ctx, tlsStateKey{}, &st)
		}
	}
	return ctx
}

// WithTLSState sets r.TLS from what ConnContext kept before calling h.
func WithTLSState(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok && r.TLS == nil {
			r.TLS = st
		}
		h.ServeHTTP(w, r)
	})
}
