package netpoll

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// In netpoll mode a Conn's socket is gust's own (Sock): these check it
// behaves as the net.Conn it replaces, with its waits on gust's event loop.

// openSockets counts the process's open socket descriptors. Event loops'
// epoll instances and eventfds are not sockets: a loop that starts or stops
// meanwhile does not move the count.
func openSockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// owner is a connection that only counts what its loop tells it.
type owner struct {
	s               *Sock
	readable, woken atomic.Int32
}

func (o *owner) Sock() *Sock              { return o.s }
func (o *owner) Readable() bool           { o.readable.Add(1); return false }
func (o *owner) Wake()                    { o.woken.Add(1) }
func (o *owner) Held(time.Duration, bool) {}

// netpollSock adopts nc into a Sock, which is closed when the test ends.
func netpollSock(t *testing.T, nc net.Conn) *Sock {
	t.Helper()
	s, _ := adopt(t, nc)
	return s
}

// adopt adopts nc into a Sock for a new owner, and removes and closes it
// when the test ends.
func adopt(t *testing.T, nc net.Conn) (*Sock, *owner) {
	t.Helper()
	o := new(owner)
	s, err := Adopt(nc)
	require.NoError(t, err)
	o.s = s
	require.NoError(t, s.Register(o))
	nc.Close()
	t.Cleanup(func() {
		s.Remove(o)
		s.Close()
	})
	return s, o
}

func TestSockReplacesTheTCPConn(t *testing.T) {
	server, client := testkit.TCPPair(t)
	before := openSockets(t)
	s := netpollSock(t, server)
	require.Equal(t, before, openSockets(t), "the duplicate replaces the original descriptor")
	require.Equal(t, server.LocalAddr().String(), s.LocalAddr().String())
	require.Equal(t, server.RemoteAddr().String(), s.RemoteAddr().String())
	require.Equal(t, client.LocalAddr().String(), s.RemoteAddr().String())
	require.IsType(t, (*net.TCPAddr)(nil), s.RemoteAddr())
	_, err := server.Write([]byte("x"))
	require.ErrorIs(t, err, net.ErrClosed, "the original is closed")

	// The socket works, both ways, and SyscallConn reaches its descriptor.
	_, err = s.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(client, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))
	raw, err := s.SyscallConn()
	require.NoError(t, err)
	var typ int
	require.NoError(t, raw.Control(func(fd uintptr) {
		typ, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TYPE)
	}))
	require.Equal(t, syscall.SOCK_STREAM, typ)

	// CloseWrite half-closes; Close closes the descriptor.
	require.NoError(t, s.CloseWrite())
	n, err := client.Read(buf)
	require.Equal(t, 0, n)
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, s.Close())
	require.Equal(t, before-1, openSockets(t))
	require.ErrorIs(t, s.Close(), net.ErrClosed)
	_, err = s.Read(buf)
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, raw.Control(func(uintptr) {}), net.ErrClosed)
}

func TestSockReadWaitsForBytesAndDeadlines(t *testing.T) {
	server, client := testkit.TCPPair(t)
	s := netpollSock(t, server)
	buf := make([]byte, 16)

	// A read past its deadline fails as a timeout, at once or after a wait.
	require.NoError(t, s.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err := s.Read(buf)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, s.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	start := time.Now()
	_, err = s.Read(buf)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a timeout: %v", err)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond)

	// A read waits for bytes that come later (the event loop wakes it).
	require.NoError(t, s.SetReadDeadline(time.Time{}))
	go func() {
		time.Sleep(30 * time.Millisecond)
		client.Write([]byte("late"))
	}()
	n, err := s.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "late", string(buf[:n]))

	// A deadline set while a read waits ends the wait.
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(buf)
		done <- err
	}()
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, s.SetReadDeadline(time.Now()))
	select {
	case err := <-done:
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting went on past its new deadline")
	}

	// Close ends a read waiting, and the peer closing reads as EOF.
	require.NoError(t, s.SetReadDeadline(time.Time{}))
	client.Close()
	_, err = s.Read(buf)
	require.ErrorIs(t, err, io.EOF)
}

func TestSockWriteWaitsForRoom(t *testing.T) {
	nc, peer := testkit.UnixPair(t)
	defer peer.Close()
	s := netpollSock(t, nc)
	require.Equal(t, "unix", s.LocalAddr().Network())

	// The peer does not read: a write fills the socket and times out.
	big := make([]byte, 16<<20)
	require.NoError(t, s.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
	n, err := s.Write(big)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Greater(t, n, 0)
	require.Less(t, n, len(big))

	// Without a deadline a write waits for room, and finishes as the peer
	// reads (the event loop wakes it at each EPOLLOUT).
	require.NoError(t, s.SetWriteDeadline(time.Time{}))
	wrote := make(chan error, 1)
	go func() {
		_, err := s.Write(big)
		wrote <- err
	}()
	got, err := io.CopyN(io.Discard, peer, int64(n+len(big)))
	require.NoError(t, err)
	require.Equal(t, int64(n+len(big)), got)
	require.NoError(t, <-wrote)

	// Close ends a write waiting for room.
	go func() {
		_, err := s.Write(big)
		wrote <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, s.Close())
	select {
	case err := <-wrote:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Close left a write waiting")
	}
}

// Calls racing Close never use a descriptor that was closed (and maybe
// reused): the descriptor is closed once the last call is done with it.
func TestSockCloseRacesCalls(t *testing.T) {
	for range 50 {
		server, client := testkit.TCPPair(t)
		s := netpollSock(t, server)
		done := make(chan struct{})
		for range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				buf := make([]byte, 8)
				for {
					if _, err := s.Write(buf); err != nil {
						return
					}
					s.SetReadDeadline(time.Now().Add(time.Millisecond))
					if _, err := s.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						return
					}
				}
			}()
		}
		go io.Copy(client, client)
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, s.Close())
		for range 4 {
			<-done
		}
		require.Equal(t, int64(sockClosed|sockDestroy), s.use.Load())
		client.Close()
	}
}

// TestSockAddressesRoundTrip: the compact TCP addresses give back what the
// socket had, IPv4, IPv6 and IPv4-mapped IPv6 alike.
func TestSockAddressesRoundTrip(t *testing.T) {
	for _, s := range []string{"127.0.0.1:80", "[::1]:65535", "[::ffff:10.1.2.3]:1", "[2001:db8::7]:443", "0.0.0.0:0"} {
		ap := netip.MustParseAddrPort(s)
		a := newTCPAddr(ap)
		require.Equal(t, ap, a.addrPort(), s)
	}
}

// TestSockKeepsIPv6Addresses: a connection over IPv6 loopback has the
// addresses its *net.TCPConn had.
func TestSockKeepsIPv6Addresses(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	server, client := testkit.TCPPairOn(t, ln)
	want := [2]string{server.LocalAddr().String(), server.RemoteAddr().String()}
	s := netpollSock(t, server)
	require.Equal(t, want, [2]string{s.LocalAddr().String(), s.RemoteAddr().String()})
	require.Equal(t, client.LocalAddr().String(), s.RemoteAddr().String())
	require.Equal(t, "tcp", s.RemoteAddr().Network())
}
