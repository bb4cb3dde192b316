package gust

import (
	"io"
	"syscall"
	"testing"
	"time"
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

// Bytes and the peer's FIN that arrive together come in one readable event,
// and no event follows: the read that takes the bytes comes short of its
// buffer, yet the socket is not drained (the next read finds the end). A
// connection waiting for bytes that gets them must still see its end,
// after a frame cut short (io.ErrUnexpectedEOF) or after a whole message
// (io.EOF). The client corks its socket so that the bytes and the FIN leave
// in one segment. In netpoll mode the loop knows the end from the event
// (peerEnded); in goroutine mode the runtime's poller does not say, which
// is why a read there that comes short is followed by one that finds
// nothing (EAGAIN) before the connection waits: a reader that waited
// straight after a short read would never see this end
// (benchmark/results/2026-11-29-floor.md).
func TestBytesAndEndInOneEvent(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		for _, tc := range []struct {
			name  string
			whole bool
			want  error
		}{{"frame cut short", false, io.ErrUnexpectedEOF}, {"whole message", true, io.EOF}} {
			t.Run(tc.name, func(t *testing.T) {
				h := newRecorder()
				c := dialRaw(t, m.start(t, h, nil), nil)
				sc := h.waitOpen(t)
				require.Eventually(t, func() bool { return waitsForBytes(sc) }, 5*time.Second, time.Millisecond,
					"waiting for bytes after the handshake")
				raw, err := tcpOf(c.nc).SyscallConn()
				require.NoError(t, err)
				require.NoError(t, raw.Control(func(fd uintptr) {
					require.NoError(t, syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1))
				}))
				f := frame(0x82, []byte("0123456789"))
				if !tc.whole {
					f = f[:len(f)-7]
				}
				c.send(f)
				require.NoError(t, tcpOf(c.nc).CloseWrite()) // sends the corked bytes and the FIN
				if tc.whole {
					require.Equal(t, []byte("0123456789"), h.waitMessage(t).data)
				}
				require.ErrorIs(t, h.waitClose(t), tc.want)
			})
		}
	})
}

// waitsForBytes reports whether c waits for bytes: parked on its event
// loop in netpoll mode; in goroutine mode, some goroutine serving a
// connection waits in the runtime's poller (c's, in a test that has no
// other).
func waitsForBytes(c *Conn) bool {
	if c.sock() != nil {
		return parkedIdle(c)
	}
	return goroutinesIn("[IO wait", "gust.(*Conn).serve") > 0
}
