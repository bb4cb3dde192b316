package gust

import (
	"io"
	"testing"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/stretchr/testify/require"
)

func TestBuiltinEventHandler(t *testing.T) {
	t.Parallel()
	var b BuiltinEventHandler
	m := new(readState).newMessage(OpText, bufpool.Get(3), 3)
	b.OnMessage(nil, m)
	require.Nil(t, m.Data, "OnMessage releases the message")
	(*Message)(nil).Close() // does nothing

	// On the wire: pings are answered, pongs and messages ignored, the
	// close handshake completed.
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		c := dialRaw(t, m.start(t, BuiltinEventHandler{}, nil), nil)
		c.send(frame(0x81, []byte("ignored")), frame(0x8A, []byte("pong")), frame(0x89, []byte("ping")))
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x8A), b0, "the first answer is the pong: the message is not echoed")
		require.Equal(t, []byte("ping"), p)
		c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
		b0, p, err = c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, closePayload(StatusNormalClosure, ""), p)
		_, err = c.br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
	})
}
