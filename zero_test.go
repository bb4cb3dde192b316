package gust

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestZeroValues constructs each exported struct at its zero value and uses
// it: a zero value works (the Upgrader, the Server, the options) or fails
// with an error (a zero Conn is a closed one, a zero PreparedMessage cannot
// be written), and never panics.
func TestZeroValues(t *testing.T) {
	t.Run("Upgrader", func(t *testing.T) {
		var u Upgrader
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := u.Upgrade(w, r); err == nil {
				c.ReadLoop()
			}
		}))
		defer ts.Close()
		c := dialRaw(t, ts.Listener.Addr().String(), nil)
		c.send(frame(0x89, []byte("hb"))) // BuiltinEventHandler answers pings
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x8A), b0)
		require.Equal(t, []byte("hb"), p)
		c.send(frame(0x88, closePayload(1000, "")))
		c.expectClose(1000)
	})
	t.Run("Server", func(t *testing.T) {
		var s Server
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- s.Serve(ln) }()
		c := dialRaw(t, ln.Addr().String(), nil)
		c.send(frame(0x81, []byte("dropped"))) // the default handler drops messages
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(ctx) }()
		c.expectClose(StatusGoingAway)
		require.NoError(t, <-shut)
		require.ErrorIs(t, <-served, ErrServerClosed)
	})
	t.Run("Server never served", func(t *testing.T) {
		var s Server
		require.NoError(t, s.Shutdown(context.Background()))
		require.NoError(t, s.Close())
		var s2 Server
		require.NoError(t, s2.Close())
	})
	t.Run("Dial with zero options", func(t *testing.T) {
		addr := startServer(t, newEcho(), &Options{})
		c, _, err := Dial(testContext(t), "ws://"+addr, nil, &DialOptions{})
		require.NoError(t, err)
		require.NoError(t, c.Close(StatusNormalClosure, ""))
		c.ReadLoop() // the nil handler is a BuiltinEventHandler
	})
	t.Run("Conn", func(t *testing.T) {
		var c Conn
		require.ErrorIs(t, c.WriteMessage(OpText, []byte("x")), net.ErrClosed)
		require.ErrorIs(t, c.WriteString("x"), net.ErrClosed)
		require.ErrorIs(t, c.WriteUncompressed(OpBinary, nil), net.ErrClosed)
		require.ErrorIs(t, c.WritePing(nil), net.ErrClosed)
		require.ErrorIs(t, c.WritePong(nil), net.ErrClosed)
		pm, err := NewPreparedMessage(OpText, []byte("x"))
		require.NoError(t, err)
		require.ErrorIs(t, c.WritePrepared(pm), net.ErrClosed)
		require.ErrorIs(t, c.Close(StatusNormalClosure, ""), net.ErrClosed)
		require.NoError(t, c.CloseNow()) // marks it closed
		require.ErrorIs(t, c.CloseNow(), net.ErrClosed)
		require.ErrorIs(t, c.WriteAsync(OpText, []byte("x"), nil), net.ErrClosed)
		require.ErrorIs(t, c.SetDeadline(time.Now()), net.ErrClosed)
		require.ErrorIs(t, c.SetReadDeadline(time.Now()), net.ErrClosed)
		require.ErrorIs(t, c.SetWriteDeadline(time.Now()), net.ErrClosed)
		require.Nil(t, c.NetConn())
		require.Nil(t, c.RemoteAddr())
		require.Nil(t, c.LocalAddr())
		require.False(t, c.Compressed())
		require.Empty(t, c.Subprotocol())
		c.Set("k", 1)
		v, ok := c.Get("k")
		require.True(t, ok)
		require.Equal(t, 1, v)
		c.Delete("k")
		c.ReadLoop() // returns at once
	})
	t.Run("PreparedMessage", func(t *testing.T) {
		var pm PreparedMessage
		require.Zero(t, pm.Opcode())
		require.Empty(t, pm.Payload())
		h := newRecorder()
		addr := startServer(t, h, nil)
		dialRaw(t, addr, nil)
		require.ErrorIs(t, h.waitOpen(t).WritePrepared(&pm), errBadOpcode)
	})
	t.Run("Message", func(t *testing.T) {
		var m Message
		m.Close()
		m.Close()
		var nilMsg *Message
		nilMsg.Close()
	})
	t.Run("errors", func(t *testing.T) {
		for _, err := range []error{&CloseError{}, &ProtocolError{}, &PanicError{}, &HandshakeError{}} {
			require.NotEmpty(t, err.Error())
		}
		require.Nil(t, errors.Unwrap(&HandshakeError{}))
	})
	t.Run("BuiltinEventHandler", func(t *testing.T) {
		var h BuiltinEventHandler
		var c Conn
		h.OnOpen(&c)
		h.OnPing(&c, []byte("x")) // the pong fails quietly: the connection is closed
		h.OnPong(&c, nil)
		h.OnClose(&c, nil)
	})
}
