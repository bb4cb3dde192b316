package gust

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// A peer that stops reading holds about unsentLimit of the kernel's memory
// beyond its own receive window, not the socket's whole send buffer (MiBs,
// once the kernel has grown it): the rest of what is written to it waits in
// gust, under OutboxSize and WriteTimeout. A write larger than the limit
// raises it, so that a large message still goes to the kernel at once.
func TestUnreadPeerHoldsLittleOfTheKernel(t *testing.T) {
	for _, mode := range []struct {
		name    string
		netpoll bool
	}{{"goroutine", false}, {"netpoll", true}} {
		t.Run(mode.name, func(t *testing.T) {
			server, _ := tcpPair(t) // the client never reads
			c := newConn(server, newConfig(Options{Netpoll: mode.netpoll}, true), nil, true, nil, "")
			defer c.CloseNow()
			require.Equal(t, unsentLimit, 1<<c.wr.unsent)

			// Fill the socket without waiting: what it takes is what the
			// kernel keeps for a peer that reads nothing.
			p := make([]byte, 16<<10)
			took := 0
			c.wr.mu.Lock()
			for took < 32<<20 {
				n, err := c.tr.write(p, true)
				require.NoError(t, err)
				if n == 0 {
					break
				}
				took += n
			}
			c.wr.mu.Unlock()
			queued := socketInt(t, c, func(fd int) (int, error) { return ioctlInt(fd, syscall.TIOCOUTQ) })
			t.Logf("the socket took %d bytes; %d wait in the kernel for the peer", took, queued)
			require.Less(t, took, 32<<20, "the kernel stopped taking bytes")
			// Its receive window (128 KiB by default) + the limit + one segment
			// of overshoot; without the limit the kernel takes 2-4 MiB here.
			require.Less(t, queued, 512<<10)

			c.wr.mu.Lock()
			c.wr.raiseUnsent(1<<20 - 100)
			c.wr.mu.Unlock()
			require.Equal(t, 1<<20, 1<<c.wr.unsent)
			lowat := socketInt(t, c, func(fd int) (int, error) {
				return syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, 0x19) // TCP_NOTSENT_LOWAT
			})
			require.Equal(t, 1<<20, lowat)
		})
	}
}

// socketInt calls f with c's descriptor.
func socketInt(t *testing.T, c *Conn, f func(fd int) (int, error)) int {
	t.Helper()
	sc, ok := c.conn.(syscall.Conn)
	require.True(t, ok, "%T is a syscall.Conn", c.conn)
	raw, err := sc.SyscallConn()
	require.NoError(t, err)
	var v int
	var ferr error
	require.NoError(t, raw.Control(func(fd uintptr) { v, ferr = f(int(fd)) }))
	require.NoError(t, ferr)
	return v
}

// ioctlInt is ioctl(fd, req, &v).
func ioctlInt(fd int, req uint) (int, error) {
	var v int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&v))); e != 0 {
		return 0, e
	}
	return int(v), nil
}
