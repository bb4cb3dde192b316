package gust

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCloseChecksCodeAndReason(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		errs := make(chan []error, 1)
		h.open = func(c *Conn) {
			errs <- []error{
				c.Close(999, ""),
				c.Close(1004, ""),
				c.Close(1005, ""),
				c.Close(1006, ""),
				c.Close(1015, ""),
				c.Close(2999, ""),
				c.Close(5000, ""),
				c.Close(1000, string(repeat("x", 124))),
				c.Close(1000, "\xff"),
				c.Close(1001, "done"),
				c.WriteString("after close"),
				c.Close(1000, ""),
			}
		}
		c := dialRaw(t, m.start(t, h, nil), nil)
		got := <-errs
		for i := range 7 {
			require.ErrorIs(t, got[i], ErrInvalidCloseCode, "case %d", i)
		}
		require.ErrorIs(t, got[7], errControlTooLong)
		require.ErrorIs(t, got[8], errInvalidUTF8)
		require.NoError(t, got[9])
		require.ErrorIs(t, got[10], net.ErrClosed)
		require.ErrorIs(t, got[11], net.ErrClosed)
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, closePayload(1001, "done"), p)
		c.send(frame(0x88, closePayload(1001, "")))
		var ce *CloseError
		require.ErrorAs(t, h.waitClose(t), &ce)
		require.Equal(t, CloseError{Code: 1001, ByPeer: false}, *ce)
		require.Equal(t, "gust: closed, the peer answering with 1001 GoingAway", ce.Error())
	})
}

// TestEveryWireCodeReachesTheClient has the server close with codes that
// only a server sends (1001 going away, 1008 policy, 1011 internal error,
// 1012–1014) and an application code, each received by gust's client.
func TestEveryWireCodeReachesTheClient(t *testing.T) {
	t.Parallel()
	for _, code := range []StatusCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4008, 4999} {
		t.Run(code.String(), func(t *testing.T) {
			h := newRecorder()
			h.open = func(c *Conn) { c.Close(code, "why") }
			addr := startServer(t, h, nil)
			in := newRecorder()
			c, _, err := Dial(testContext(t), "ws://"+addr, in, nil)
			require.NoError(t, err)
			runClient(t, c)
			var ce *CloseError
			require.ErrorAs(t, in.waitClose(t), &ce)
			require.Equal(t, CloseError{Code: code, Reason: "why", ByPeer: true}, *ce)
			require.ErrorAs(t, h.waitClose(t), &ce)
			require.Equal(t, CloseError{Code: code, ByPeer: false}, *ce)
		})
	}
}

func TestCloseNowCutsAtOnce(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	addr := startServer(t, h, &Options{WriteTimeout: time.Hour})
	raw := dialRaw(t, addr, nil) // never reads
	c := h.waitOpen(t)
	big := make([]byte, 1<<20)
	failed := blockWrites(t, c, func() error { return c.WriteMessage(OpBinary, big) })
	require.NoError(t, c.CloseNow())
	require.Error(t, <-failed)
	err := h.waitClose(t)
	require.ErrorIs(t, err, net.ErrClosed)
	require.Contains(t, err.Error(), "CloseNow")
	require.ErrorIs(t, c.CloseNow(), net.ErrClosed)
	raw.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, raw.br) // what was sent, then the end: no close frame needed
	require.True(t, err == nil || isReset(err), "read: %v", err)
}

func TestCloseTimeoutWhenPeerNeverAnswers(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	h.open = func(c *Conn) { c.Close(1000, "") }
	c := dialRaw(t, startServer(t, h, &Options{CloseTimeout: 100 * time.Millisecond}), nil)
	_ = c
	err := h.waitClose(t)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
}

func TestStatusCodeString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "NormalClosure", StatusNormalClosure.String())
	require.Equal(t, "StatusCode(4000)", StatusCode(4000).String())
	require.Equal(t, StatusCode(0), CloseStatus(errors.New("x")))
	require.Contains(t, (&CloseError{Code: 1000}).Error(), "1000")
	require.Contains(t, (&CloseError{Code: 4000, Reason: "r"}).Error(), `"r"`)
	require.Contains(t, (&ProtocolError{Code: 1002, Reason: "bad"}).Error(), "bad")
	for _, op := range []Opcode{opContinuation, OpText, OpBinary, opClose, opPing, opPong, 5} {
		require.NotEmpty(t, op.String())
	}
}

func TestMessagesAfterOurCloseAreDropped(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	h.open = func(c *Conn) { c.Close(StatusNormalClosure, "") }
	c := dialRaw(t, startServer(t, h, nil), nil)
	b0, _, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x88), b0)
	c.send(frame(0x81, []byte("late")), frame(0x88, closePayload(StatusNormalClosure, "")))
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
	require.Empty(t, h.messages, "the browser API drops messages that arrive while closing")
}

func TestProtocolErrorAfterOurClose(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	h.open = func(c *Conn) { c.Close(4000, "bye") }
	c := dialRaw(t, startServer(t, h, nil), nil)
	b0, p, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x88), b0)
	require.Equal(t, closePayload(4000, "bye"), p)
	c.send(frame(0xC1, []byte("rsv1")))
	var pe *ProtocolError
	require.ErrorAs(t, h.waitClose(t), &pe)
	require.Equal(t, StatusProtocolError, pe.Code)
	_, err = c.br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "no second close frame")
}

// TestCloseState walks the close state through its steps: each is taken
// once, the sent code sits beside them, a pending Conn's opening is the one
// step undone, and the first reason recorded is kept.
func TestCloseState(t *testing.T) {
	t.Parallel()
	var s closeState
	s.pending()
	require.True(t, s.has(netClosed))
	s.opened()
	require.False(t, s.has(netClosed|closeSent|closeReceived|closeEnded|closeWriting))

	require.True(t, s.startSending())
	require.True(t, s.has(closeWriting))
	require.False(t, s.has(closeSent))
	s.sent()
	require.False(t, s.has(closeWriting))
	require.True(t, s.has(closeSent))
	require.False(t, s.startSending(), "one close frame")
	s.flushed(StatusGoingAway)
	require.Equal(t, StatusGoingAway, s.sentCode())
	require.False(t, s.received(), "gust closed first")

	require.True(t, s.take(netClosed))
	require.False(t, s.take(netClosed))
	require.True(t, s.take(closeEnded))
	require.Equal(t, StatusGoingAway, s.sentCode(), "the steps leave the code alone")

	var peer closeState
	require.True(t, peer.received(), "the peer closed first")
	require.True(t, peer.has(closeReceived))
	require.Zero(t, peer.sentCode())
	require.True(t, peer.startSending())
	peer.sent()
	require.Zero(t, peer.sentCode(), "a close frame whose flush failed has no code")

	require.NoError(t, peer.recorded())
	peer.record(ErrSlowConsumer)
	peer.record(errClosedNow)
	require.Equal(t, ErrSlowConsumer, peer.recorded(), "the first reason stays")
}
