package netpoll

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// Raw is goroutine mode's way to the descriptor: these check its reads into
// a pooled buffer taken once bytes have come, reads that do not wait, and
// writes that arm their deadline only to wait.

func TestRawReads(t *testing.T) {
	a, b := testkit.TCPPair(t)
	var r Raw
	require.True(t, r.Init(a))
	_, _, again, err := r.Read(nil, 1024, true)
	require.NoError(t, err)
	require.True(t, again, "nothing has come: a read that may not wait says so")

	_, err = b.Write([]byte("hello"))
	require.NoError(t, err)
	buf, n, again, err := r.Read(nil, 1024, false)
	require.NoError(t, err)
	require.False(t, again)
	require.Len(t, *buf, 1024, "a pooled buffer of the size asked for")
	require.Equal(t, "hello", string((*buf)[:n]))

	dst := make([]byte, 3)
	go b.Write([]byte("abc"))
	buf, n, _, err = r.Read(dst, 1024, false)
	require.NoError(t, err)
	require.Nil(t, buf, "into dst, when given")
	require.Equal(t, "abc", string(dst[:n]))

	b.Close()
	_, _, _, err = r.Read(nil, 1024, false)
	require.ErrorIs(t, err, io.EOF)

	require.False(t, new(Raw).Init(struct{ net.Conn }{a}), "not a syscall.Conn")
}

func TestRawWrites(t *testing.T) {
	a, b := testkit.TCPPair(t)
	a.SetWriteBuffer(16 << 10)
	b.SetReadBuffer(16 << 10)
	var r Raw
	require.True(t, r.Init(a))
	big := bytes.Repeat([]byte("x"), 4<<20)
	n, armed, err := r.Write(big, true, nil)
	require.NoError(t, err)
	require.False(t, armed)
	require.Less(t, n, len(big), "with try set, what the socket takes at once")
	require.Zero(t, r.Left(), "nothing in progress once it returns")

	// Nobody reads: the write arms its deadline before it waits, and ends there.
	arms := 0
	_, armed, err = r.Write(big[n:], false, func() bool {
		arms++
		a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		return true
	})
	require.True(t, armed)
	require.GreaterOrEqual(t, arms, 1)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	a.SetWriteDeadline(time.Time{})

	// The peer reads again: a write that waits completes.
	go io.Copy(io.Discard, b)
	n, _, err = r.Write(big, false, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, len(big), n)

	// A socket with room: nothing to arm.
	c, _ := testkit.TCPPair(t)
	var rc Raw
	require.True(t, rc.Init(c))
	_, armed, err = rc.Write([]byte("small"), false, func() bool { return true })
	require.NoError(t, err)
	require.False(t, armed, "it took it at once")
}
