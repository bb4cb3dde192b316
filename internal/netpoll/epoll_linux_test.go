package netpoll

import (
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// failLoops makes every running event loop's epoll instance fail, as if
// epoll_wait had returned an error: the instance's descriptor is replaced
// by one that is not an epoll instance (so that its number is not reused
// meanwhile), and the loop is woken to find it so. It returns once each of
// them has given its instance up.
func failLoops(t *testing.T) {
	t.Helper()
	devnull, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer syscall.Close(devnull)
	for _, p := range pollers.p {
		p.mu.Lock()
		running, gen, epfd, wakefd := p.running, p.gen.Load(), p.epfd, p.wakefd
		if running {
			require.NoError(t, syscall.Dup3(devnull, epfd, syscall.O_CLOEXEC))
			var one = [8]byte{1}
			syscall.Write(wakefd, one[:])
		}
		p.mu.Unlock()
		if running {
			require.Eventually(t, func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return !p.running || p.gen.Load() != gen
			}, 5*time.Second, time.Millisecond, "the loop gives up its instance")
		}
	}
}

// An epoll instance that fails (epoll_wait returns an error, which should
// never happen) is given up: its parked sockets' owners are woken, and a
// socket registered again joins a new instance, whose events reach it; a
// call waiting on a socket (a write to a peer that stopped reading)
// rejoins the new instance, so that it goes on when the socket has room,
// not at its deadline.
func TestFailedEpollInstance(t *testing.T) {
	parkedConn, parkedPeer := testkit.UnixPair(t)
	defer parkedPeer.Close()
	writerConn, writerPeer := testkit.UnixPair(t)
	defer writerPeer.Close()
	ps, po := adopt(t, parkedConn)
	ws, _ := adopt(t, writerConn)
	require.False(t, ps.Park(), "nothing arrived: parked")

	big := make([]byte, 16<<20) // past what the socket buffers hold
	require.NoError(t, ws.SetWriteDeadline(time.Now().Add(time.Minute)))
	wrote := make(chan error, 1)
	go func() {
		_, err := ws.Write(big)
		wrote <- err
	}()
	time.Sleep(100 * time.Millisecond) // the write fills the socket and waits
	failLoops(t)

	require.Eventually(t, func() bool { return po.woken.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the parked socket's owner is woken")
	require.True(t, ps.Unpark())
	require.NoError(t, ps.Register(po))
	require.False(t, ps.Park())
	parkedPeer.Write([]byte("x"))
	require.Eventually(t, func() bool { return po.readable.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the new instance reports the parked socket readable")

	done := make(chan struct{})
	go func() {
		io.CopyN(io.Discard, writerPeer, int64(len(big)))
		close(done)
	}()
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting write did not go on once the peer read")
	}
	<-done
}
