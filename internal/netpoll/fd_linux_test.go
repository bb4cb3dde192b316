package netpoll

import (
	"bytes"
	"io"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// ReadFD and WriteFD make a read or write of at most rawMax bytes as a raw
// system call and a longer one the usual way: both report what was read or
// written, a socket with nothing to read or no room as again, and the
// peer's end as io.EOF.
func TestFDAcrossRawMax(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	a, b := fds[0], fds[1]
	defer syscall.Close(a)

	buf := make([]byte, 4*rawMax)
	_, again, err := ReadFD(a, buf[:16])
	require.NoError(t, err)
	require.True(t, again, "a short read finds nothing")
	_, again, err = ReadFD(a, buf)
	require.NoError(t, err)
	require.True(t, again, "a long read finds nothing")

	for _, size := range []int{1, rawMax, rawMax + 1} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		n, again, err := WriteFD(b, msg)
		require.NoError(t, err)
		require.False(t, again)
		require.Equal(t, size, n)
		got := 0
		for got < size {
			n, again, err := ReadFD(a, buf[got:size])
			require.NoError(t, err)
			require.False(t, again, "the bytes written are there")
			got += n
		}
		require.Equal(t, msg, buf[:size], "%d bytes, whole", size)
	}

	big := make([]byte, 64<<20) // more than the socket takes
	n, again, err := WriteFD(b, big)
	require.NoError(t, err)
	require.True(t, again, "a full socket says so")
	require.Positive(t, n)
	n2, again, err := WriteFD(b, big[:16])
	require.NoError(t, err)
	require.True(t, again, "a short write to a full socket says so")
	require.Zero(t, n2)

	syscall.Close(b)
	for left := n; left > 0; {
		k, _, err := ReadFD(a, buf)
		require.NoError(t, err)
		left -= k
	}
	_, _, err = ReadFD(a, buf[:16])
	require.ErrorIs(t, err, io.EOF)
}
