//go:build linux

package gust

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAbruptDisconnectsLeaveNothingBehind opens 1,000 connections, leaves
// half of them in the middle of a 64 KiB message and the other half idle
// between frames (in netpoll mode, parked on gust's epoll with no
// goroutine), kills them all without a close frame (half of each with a
// TCP reset, half with a FIN), and checks that gust gives back everything
// it held for them: OnClose once per connection, with the error that says
// how it ended, the goroutines, file descriptors and heap of the process
// back where they were, and no connection left in the netpoll poller. It
// runs over the TCP server modes, goroutine and netpoll, on both paths.
func TestAbruptDisconnectsLeaveNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	const (
		conns     = 1000
		announced = 64 << 10 // the payload length the data frame's header announces
		sent      = 1 << 10  // the payload bytes actually sent
	)
	raiseFileLimit(t, 2*conns+512)

	// Connection i is idle when i/2 is odd and mid-message otherwise; it
	// is reset when i is even and closed with a FIN otherwise: each way of
	// ending meets each state conns/4 times.
	idle := func(i int) bool { return (i/2)%2 == 1 }
	reset := func(i int) bool { return i%2 == 0 }

	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		h.opened = nil // a Conn kept here would keep what gust should give back
		h.messages = make(chan recordedMessage, conns)
		h.closed = make(chan error, conns)
		addr := m.start(t, h, nil)

		runtime.GC() // with heapInuse's, empties sync.Pool's victim cache of earlier tests' buffers
		baseGoroutines := runtime.NumGoroutine()
		baseFDs := countFDs(t)
		baseHeap := heapInuse()
		basePolled := pollerConns()

		// Each client sends, in one write after its handshake, a ping, and
		// unless it stays idle the start of a binary frame that announces
		// 64 KiB; the pong tells it that the server has read them.
		ping := frame(0x89, []byte("ready?"))
		head := binary.BigEndian.AppendUint64([]byte{0x82, 0x80 | 127}, announced)
		head = append(head, 1, 2, 3, 4) // masking key
		start := append(append(ping[:len(ping):len(ping)], head...), make([]byte, sent)...)

		clients := make([]net.Conn, conns)
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		next := atomic.Int64{}
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= conns {
						return
					}
					send := start
					if idle(i) {
						send = ping
					}
					nc, err := openAndPing(addr, send)
					clients[i] = nc
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Cleanup(func() { // only matters when the test failed half way
			for _, nc := range clients {
				if nc != nil {
					nc.Close()
				}
			}
		})
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int32(conns), h.opens.Load())
		require.Zero(t, len(h.closed), "no connection ended before the kill")

		// The server holds a message buffer for each connection in the
		// middle of a message now.
		held := int64(0)
		require.Eventually(t, func() bool {
			held = int64(heapInuse()) - int64(baseHeap)
			return held > conns/2*announced/2
		}, 10*time.Second, 10*time.Millisecond, "the partial messages should hold about %d MiB", conns/2*announced>>20)
		if strings.HasSuffix(m.name, "-netpoll") {
			// The idle half is parked: the kill below reaches them through
			// the poller. (Those in the middle of a message may have parked
			// once too, between the handshake and the frame.)
			polled := 0
			require.Eventually(t, func() bool {
				polled = pollerConns() - basePolled
				return polled >= conns/2
			}, 10*time.Second, 10*time.Millisecond, "%d connections in the poller, want the %d idle ones at least", polled, conns/2)
		}
		t.Logf("%d connections, half of them mid-message: %+d goroutines, %+d fds, %+d MiB in use, %+d in the poller",
			conns, runtime.NumGoroutine()-baseGoroutines, countFDs(t)-baseFDs, held>>20, pollerConns()-basePolled)

		// No collection until the descriptors are counted: the finalizer of
		// an unreachable net.Conn would close a descriptor gust forgot to.
		gcPercent := debug.SetGCPercent(-1)
		defer debug.SetGCPercent(gcPercent)
		for i, nc := range clients {
			if reset(i) {
				require.NoError(t, tcpOf(nc).SetLinger(0)) // Close sends a RST
				nc = tcpOf(nc)                             // under TLS, without a close_notify first
			}
			nc.Close()
		}

		require.Eventually(t, func() bool { return len(h.closed) >= conns }, 20*time.Second, 10*time.Millisecond,
			"OnClose calls")
		const slack = 3
		var goroutines, fds, polled int
		ok := assertEventually(20*time.Second, func() bool {
			goroutines, fds, polled = runtime.NumGoroutine(), countFDs(t), pollerConns()
			return goroutines <= baseGoroutines+slack && fds <= baseFDs+slack && polled <= basePolled
		})
		require.True(t, ok, "goroutines %d (were %d), open fds %d (were %d), connections in the poller %d (were %d)",
			goroutines, baseGoroutines, fds, baseFDs, polled, basePolled)
		debug.SetGCPercent(gcPercent)
		require.Equal(t, conns, len(h.closed), "OnClose exactly once per connection")

		// A FIN between frames is a plain io.EOF, in the middle of a
		// message io.ErrUnexpectedEOF; a reset is ECONNRESET either way.
		var eofs, unexpected, resets int
		var others []error
		for range conns {
			switch err := <-h.closed; {
			case errors.Is(err, io.EOF):
				eofs++
			case errors.Is(err, io.ErrUnexpectedEOF):
				unexpected++
			case errors.Is(err, syscall.ECONNRESET):
				resets++
			default:
				others = append(others, err)
			}
		}
		require.Empty(t, others, "every OnClose error is the reset or the EOF; %d others, the first: %v; messages delivered: %d",
			len(others), others[:min(len(others), 5)], len(h.messages))
		require.Equal(t, []int{conns / 4, conns / 4, conns / 2}, []int{eofs, unexpected, resets},
			"OnClose errors: io.EOF (idle, FIN), io.ErrUnexpectedEOF (mid-message, FIN), ECONNRESET (reset)")

		runtime.GC()
		runtime.GC() // the second empties sync.Pool's victim cache
		after := heapInuse()
		require.LessOrEqual(t, int64(after)-int64(baseHeap), int64(32<<20),
			"heap in use %d MiB, %d MiB before the connections", after>>20, baseHeap>>20)
	})
}

// openAndPing completes a handshake, sends start, and waits for the pong
// that the ping at its head asks for.
func openAndPing(addr string, start []byte) (net.Conn, error) {
	nc, err := dialAddr(addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(append([]byte(handshakeRequest(addr)), start...)); err != nil {
		return nc, err
	}
	br := bufio.NewReaderSize(nc, 256)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nc, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nc, errors.New("handshake refused: " + resp.Status)
	}
	pong := make([]byte, 2+len("ready?"))
	if _, err := io.ReadFull(br, pong); err != nil {
		return nc, err
	}
	if pong[0] != 0x8A || string(pong[2:]) != "ready?" {
		return nc, errors.New("expected the pong, got " + string(pong))
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// raiseFileLimit makes sure the process may open n files, and puts the
// limit back when the test ends.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d files the test needs", lim.Max, n)
	}
	old := lim
	lim.Cur = n
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}
