package gust

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Peers that attack gust: one that never reads, one that announces more
// than it sends, one that sends bad frames and then stays. Each test bounds
// what such a peer can hold, over the TCP server modes: goroutine and
// netpoll mode (where the connection waits for the peer parked on gust's
// epoll), on the Upgrader's path and on the Server's.

// blockWrites writes 1 MiB messages to c from a goroutine until a write
// fails, and returns once a write has made no progress while holding c's
// write lock for three looks 20 ms apart: the peer's socket buffers are
// full and the write waits on them. The returned channel receives the
// error that ended the writes.
func blockWrites(t *testing.T, c *Conn, write func() error) <-chan error {
	t.Helper()
	var progress atomic.Int64
	failed := make(chan error, 1)
	go func() {
		for {
			if err := write(); err != nil {
				failed <- err
				return
			}
			progress.Add(1)
		}
	}()
	last, still := int64(-1), 0
	for still < 3 {
		time.Sleep(20 * time.Millisecond)
		held := !c.wr.mu.TryLock()
		if !held {
			c.wr.mu.Unlock()
		}
		if n := progress.Load(); n != last || !held {
			last, still = n, 0
		} else {
			still++
		}
	}
	return failed
}

// On the Server's path the test shuts down through its Upgrader field,
// whose tracker holds the Server's connections: Server.Shutdown adds only
// the closing of its listeners (TestServerShutdownCoversItsUpgrade), and
// runServer checks that Serve returns ErrServerClosed once it is closed.
func TestShutdownReturnsByItsDeadlineWithAPeerThatNeverReads(t *testing.T) {
	t.Parallel()
	forEachTCPModeParallel(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		var u *Upgrader
		addr := m.serve(t, h, &Options{WriteTimeout: time.Hour}, func(up *Upgrader) { u = up }) // only ctx can end the stalled write

		dialRaw(t, addr, nil) // never reads
		stalled := h.waitOpen(t)
		healthy := dialRaw(t, addr, nil)
		h.waitOpen(t)
		big := make([]byte, 1<<20)
		failed := blockWrites(t, stalled, func() error { return stalled.WriteMessage(OpBinary, big) })

		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- u.Shutdown(ctx) }()
		// The healthy peer gets its 1001 while the stalled one blocks its
		// own write, and nothing else.
		healthy.expectClose(StatusGoingAway)
		select {
		case err := <-shut:
			require.ErrorIs(t, err, context.DeadlineExceeded)
		case <-time.After(10 * time.Second):
			t.Fatal("Shutdown did not return after its context's deadline")
		}
		require.Error(t, <-failed)
		errs := []error{h.waitClose(t), h.waitClose(t)}
		require.Contains(t, []StatusCode{CloseStatus(errs[0]), CloseStatus(errs[1])}, StatusGoingAway)
		require.True(t, errors.Is(errs[0], ErrServerClosed) || errors.Is(errs[1], ErrServerClosed),
			"the stalled connection is cut with ErrServerClosed: %v, %v", errs[0], errs[1])
	})
}

func TestWriteTimeoutCutsAPeerThatNeverReads(t *testing.T) {
	t.Parallel()
	big := make([]byte, 1<<20)
	cases := []struct {
		name  string
		write func(t *testing.T, c *Conn) <-chan error // starts writing to c for ever
	}{
		{"WriteMessage", func(t *testing.T, c *Conn) <-chan error {
			return blockWrites(t, c, func() error { return c.WriteMessage(OpBinary, big) })
		}},
		{"WriteAsync", func(t *testing.T, c *Conn) <-chan error {
			done := make(chan error, 1)
			go func() {
				for {
					err := c.WriteAsync(OpBinary, big, func(err error) {
						if err != nil {
							select {
							case done <- err:
							default:
							}
						}
					})
					if errors.Is(err, ErrQueueFull) {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if err != nil {
						return
					}
				}
			}()
			return done
		}},
		{"WritePreparedAsync", func(t *testing.T, c *Conn) <-chan error {
			pm, err := NewPreparedMessage(OpBinary, big)
			require.NoError(t, err)
			go func() {
				// Queue until the outbox is full (ErrQueueFull) or the
				// connection has ended; the writer blocks on the first.
				for c.WritePreparedAsync(pm, nil) == nil {
				}
			}()
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachTCPModeParallel(t, func(t *testing.T, m serverMode) {
				h := newRecorder()
				addr := m.start(t, h, &Options{WriteTimeout: 300 * time.Millisecond})
				dialRaw(t, addr, nil) // never reads
				c := h.waitOpen(t)
				failed := tc.write(t, c)
				err := h.waitClose(t)
				require.ErrorIs(t, err, os.ErrDeadlineExceeded, "OnClose: %v", err)
				require.Contains(t, err.Error(), "write timeout")
				if failed != nil {
					require.ErrorIs(t, <-failed, os.ErrDeadlineExceeded)
				}
			})
		})
	}
}

func TestWriteTimeoutCutsAnEchoPeerThatNeverReads(t *testing.T) {
	t.Parallel()
	// The echo is written from OnMessage, corked: the read goroutine itself
	// (in netpoll mode, the one resumed for the bytes) blocks in the flush,
	// and the timeout must free it.
	forEachTCPModeParallel(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, &Options{WriteTimeout: 300 * time.Millisecond})
		c := dialRaw(t, addr, nil)
		msg := frame(0x82, make([]byte, 64<<10))
		go func() {
			for {
				if _, err := c.nc.Write(msg); err != nil {
					return
				}
			}
		}()
		err := h.waitClose(t)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "OnClose: %v", err)
	})
}

func TestSetWriteDeadlineStillAppliesUnderTheWriteTimeout(t *testing.T) {
	t.Parallel()
	forEachTCPModeParallel(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		addr := m.start(t, h, &Options{WriteTimeout: time.Hour})
		dialRaw(t, addr, nil) // never reads
		c := h.waitOpen(t)
		big := make([]byte, 1<<20)
		failed := blockWrites(t, c, func() error { return c.WriteMessage(OpBinary, big) })
		require.NoError(t, c.SetWriteDeadline(time.Now()))
		require.ErrorIs(t, <-failed, os.ErrDeadlineExceeded)
		require.ErrorIs(t, h.waitClose(t), os.ErrDeadlineExceeded)
	})
}

// settledHeap is the heap in use once the pools are empty: two collections
// clear a sync.Pool.
func settledHeap() uint64 {
	runtime.GC()
	return heapInuse()
}

// stableHeap is settledHeap once what earlier tests let go has gone: two
// readings 50 ms apart within 256 KiB of each other (for at most 2 s), so
// that a baseline is not taken while a server of the last test still ends.
func stableHeap() uint64 {
	last := settledHeap()
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		now := settledHeap()
		if max(now, last)-min(now, last) < 256<<10 {
			return now
		}
		last = now
	}
	return last
}

// sendPartialFrame starts a binary frame that announces n bytes and sends
// the first len(part) of them (mask key 0: the payload goes as it is).
func sendPartialFrame(nc net.Conn, n int, part []byte) error {
	hdr := []byte{0x82, 0x80 | 127}
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	hdr = append(hdr, 0, 0, 0, 0)
	_, err := nc.Write(append(hdr, part...))
	return err
}

func TestAnnouncedLengthCommitsNoMemory(t *testing.T) {
	// Each peer announces a frame just under the 16 MiB limit and sends
	// 128 KiB of it: what gust holds must follow the 128 KiB.
	const (
		peers = 16
		sent  = 128 << 10
	)
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		addr := m.start(t, h, nil)
		before := stableHeap()
		part := make([]byte, sent)
		for range peers {
			c := dialRaw(t, addr, nil)
			require.NoError(t, sendPartialFrame(c.nc, 16<<20-1, part))
			h.waitOpen(t)
		}
		// Wait until the server has read what was sent (the heap holds at
		// least half of it: the baseline moves a little as earlier tests'
		// garbage goes), then measure.
		growth := func() uint64 { return max(settledHeap(), before) - before }
		assertEventually(5*time.Second, func() bool { return growth() >= peers*sent/2 })
		settle := 200 * time.Millisecond // for what the server might read or allocate late
		if testing.Short() {
			settle = 50 * time.Millisecond
		}
		time.Sleep(settle)
		grown := growth()
		t.Logf("heap grew by %d KiB for %d peers that sent %d KiB each", grown>>10, peers, sent>>10)
		// About 2× what arrived plus a 64 KiB read buffer, per peer.
		require.Less(t, grown, uint64(peers*512<<10))
	})
}

func TestFragmentedMessageGrowsLinearly(t *testing.T) {
	// A message sent in 4 KiB fragments: the bytes gust allocates to
	// assemble it must grow with its size, not with its square.
	if testing.Short() {
		t.Skip("sends 72 MiB")
	}
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		got := make(chan int, 1)
		h := newRecorder()
		h.message = func(_ *Conn, msg *Message) {
			got <- len(msg.Data)
			msg.Close()
		}
		addr := m.start(t, h, &Options{MaxMessageSize: 128 << 20})
		c := dialRaw(t, addr, nil)
		c.nc.SetDeadline(time.Now().Add(2 * time.Minute))
		fragment := make([]byte, 4<<10)
		send := func(size int) uint64 {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.TotalAlloc
			w := bufio.NewWriterSize(c.nc, 256<<10)
			hdr := []byte{0, 0x80 | 126, byte(len(fragment) >> 8), byte(len(fragment)), 0, 0, 0, 0}
			for i := 0; i < size; i += len(fragment) {
				hdr[0] = 0x00 // continuation
				if i == 0 {
					hdr[0] = 0x02
				}
				if i+len(fragment) >= size {
					hdr[0] |= 0x80
				}
				w.Write(hdr)
				w.Write(fragment)
			}
			require.NoError(t, w.Flush())
			select {
			case n := <-got:
				require.Equal(t, size, n)
			case <-time.After(2 * time.Minute):
				t.Fatal("message not delivered")
			}
			runtime.ReadMemStats(&ms)
			return ms.TotalAlloc - before
		}
		small := send(8 << 20)
		large := send(64 << 20)
		t.Logf("allocated %d MiB for 8 MiB, %d MiB for 64 MiB: ratio %.1f", small>>20, large>>20, float64(large)/float64(small))
		// Linear is 8; doubling a buffer lands 8 MiB and 64 MiB on different
		// sides of its steps (8-16 here, varying with what the first reads
		// give); the square is 64.
		require.Less(t, float64(large)/float64(small), 32.0, "8× the size must cost about 8× the bytes, not 64×")
	})
}

func TestFailedConnectionLingersBriefly(t *testing.T) {
	t.Parallel()
	// After a protocol error gust sends its close frame and waits for the
	// peer to stop sending, not for CloseTimeout: a peer that sends a bad
	// frame and then neither closes nor reads holds its descriptor for a
	// fraction of a second; one that keeps trickling bytes, for about a
	// second.
	forEachTCPModeParallel(t, func(t *testing.T, m serverMode) {
		for _, trickle := range []bool{false, true} {
			name := map[bool]string{false: "silent", true: "trickling"}[trickle]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := newEcho()
				addr := m.start(t, h, &Options{CloseTimeout: time.Minute})
				c := dialRaw(t, addr, nil)
				c.send(frame(0x83, nil)) // reserved opcode
				stop := make(chan struct{})
				defer close(stop)
				if trickle {
					go func() {
						for {
							select {
							case <-stop:
								return
							case <-time.After(20 * time.Millisecond):
								if _, err := c.nc.Write([]byte{0}); err != nil {
									return
								}
							}
						}
					}()
				}
				b0, p, err := c.readFrame()
				require.NoError(t, err)
				require.Equal(t, byte(0x88), b0)
				require.Equal(t, StatusProtocolError, StatusCode(binary.BigEndian.Uint16(p)))
				// Without answering, the socket must be closed well
				// before the minute of CloseTimeout.
				c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = c.br.ReadByte()
				require.True(t, errors.Is(err, io.EOF) || isReset(err), "want the server to close, got %v", err)
				var pe *ProtocolError
				require.ErrorAs(t, h.waitClose(t), &pe)
			})
		}
	})
}

// isReset reports a connection reset by the peer.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// plainListener hands out connections without SyscallConn, as TLS and
// wrapping listeners do: their writes take the deadline path of netWrite.
type plainListener struct{ net.Listener }

func (l plainListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return plainConn{nc}, nil
}

// Goroutine mode only: netpoll mode does not apply to a conn without
// SyscallConn, which has no descriptor to park on gust's epoll (with
// Netpoll set, such a conn runs in goroutine mode).
func TestWriteTimeoutOnAConnWithoutSyscallConn(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	s := newServer(h, &Options{WriteTimeout: 300 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(plainListener{ln}) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-served, ErrServerClosed)
	})
	dialRaw(t, ln.Addr().String(), nil) // never reads
	c := h.waitOpen(t)
	require.IsType(t, (*netConnTransport)(nil), c.tr, "the connection must not write through a RawConn")
	big := make([]byte, 1<<20)
	failed := blockWrites(t, c, func() error { return c.WriteMessage(OpBinary, big) })
	require.ErrorIs(t, <-failed, os.ErrDeadlineExceeded)
	err = h.waitClose(t)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "OnClose: %v", err)
}

// Memory follows the bytes that arrived, from the first: a peer that sends
// a frame header announcing 16 MiB and nothing else, or one small
// non-final fragment, holds no message buffer beyond what it sent.
func TestHeaderOrFragmentCommitsNoMessageBuffer(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of 1,200 connections per mode")
	}
	const peers = 200
	announce := func(c *rawClient) error { return sendPartialFrame(c.nc, 16<<20-1, nil) }
	fragment := func(c *rawClient) error {
		_, err := c.nc.Write(frame(0x02, make([]byte, 1<<10))) // binary, not final
		return err
	}
	for _, tc := range []struct {
		name string
		send func(c *rawClient) error
	}{{"header", announce}, {"fragment", fragment}} {
		t.Run(tc.name, func(t *testing.T) {
			forEachTCPMode(t, func(t *testing.T, m serverMode) {
				h := newRecorder()
				h.opened, h.closed = nil, make(chan error, 4*peers) // three rounds of peers end
				addr := m.start(t, h, nil)
				// What idle connections hold, then what the same number
				// holding a header or a fragment hold: the difference is the
				// frame's.
				grow := func(send func(c *rawClient) error) uint64 {
					before := settledHeap()
					for range peers {
						c := dialRaw(t, addr, nil)
						if send != nil {
							require.NoError(t, send(c))
						}
					}
					assertEventually(5*time.Second, func() bool { return h.opens.Load()%peers == 0 })
					return max(stableHeap(), before) - before // once the frames are read, the heap stops moving
				}
				grow(nil) // the server's first connections make what it keeps
				idle := grow(nil)
				held := grow(tc.send)
				per := (int64(held) - int64(idle)) / peers
				t.Logf("per connection: idle %d B, with a %s %d B more", idle/peers, tc.name, per)
				// It held a 64 KiB message buffer, and in goroutine mode a
				// 64 KiB read buffer besides. Goroutine mode's heap is
				// noisier (net/http's, the goroutines'): its bound is looser.
				bound := int64(2 << 10)
				switch {
				case !strings.HasSuffix(m.name, "-netpoll"):
					bound = 8 << 10
				case m.path == "tls":
					bound = 3 << 10 // crypto/tls's input buffer grows to the record's size, and keeps it
				}
				require.Less(t, per, bound, "a %s holds no more than the bytes that came", tc.name)
			})
		})
	}
}

// A peer that announces a frame and trickles it is ended once the message
// has taken Options.MessageTimeout, and so is one that stops in the middle,
// whatever read deadline the handler set; a message that arrives in time
// passes, and the handler's deadline is back once it has.
func TestMessageTimeoutEndsAMessageThatNeverFinishes(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		t.Parallel() // waits on timers: the modes wait side by side
		h := newRecorder()
		h.open = func(c *Conn) { c.SetReadDeadline(time.Now().Add(time.Hour)) }
		addr := m.start(t, h, &Options{MessageTimeout: bound})

		// In time: a message in three pieces, 40 ms apart.
		ok := dialRaw(t, addr, nil)
		h.waitOpen(t)
		msg := frame(0x82, repeat("x", 300))
		for i := 0; i < len(msg); i += 100 {
			ok.send(msg[i:min(i+100, len(msg))])
			time.Sleep(40 * time.Millisecond)
		}
		h.expectMessage(t, OpBinary, repeat("x", 300))

		for _, stop := range []bool{false, true} {
			c := dialRaw(t, addr, nil)
			h.waitOpen(t)
			start := time.Now()
			require.NoError(t, sendPartialFrame(c.nc, 16<<20-1, []byte{0}))
			if !stop {
				go func() { // a byte every 50 ms, until the connection ends
					for range 200 {
						time.Sleep(50 * time.Millisecond)
						if _, err := c.nc.Write([]byte{0}); err != nil {
							return
						}
					}
				}()
			}
			c.expectClose(StatusPolicyViolation)
			err := h.waitClose(t)
			took := time.Since(start)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
			// The bound is counted on a millisecond clock (clockMS), whose
			// truncation may end it up to a millisecond early.
			require.GreaterOrEqual(t, took, bound-time.Millisecond)
			require.Less(t, took, bound+2*time.Second, "ended %v after the first byte", took)
		}

		// The connection whose message came in time is still open, though
		// it has now been quiet for longer than the bound.
		ok.send(frame(0x82, []byte("again")))
		h.expectMessage(t, OpBinary, []byte("again"))
	})
}

// The handler's own read deadline still ends a connection waiting in the
// middle of a message when it comes before MessageTimeout.
func TestReadDeadlineBeforeMessageTimeout(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		t.Parallel() // waits on timers: the modes wait side by side
		h := newRecorder()
		h.open = func(c *Conn) { c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) }
		addr := m.start(t, h, &Options{MessageTimeout: time.Minute})
		c := dialRaw(t, addr, nil)
		h.waitOpen(t)
		require.NoError(t, sendPartialFrame(c.nc, 1<<20, []byte{0}))
		err := h.waitClose(t)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		var pe *ProtocolError
		require.False(t, errors.As(err, &pe), "the read deadline, not the message's bound: %v", err)
	})
}

func TestMessageTimeoutDefault(t *testing.T) {
	require.Equal(t, 90*time.Second, newConfig(Options{}, true).MessageTimeout)
	require.Negative(t, newConfig(Options{MessageTimeout: -1}, true).MessageTimeout)
}

// A message of endless empty continuation frames ends at once.
func TestEmptyContinuationFloodEnds(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		addr := m.start(t, h, &Options{CloseTimeout: 200 * time.Millisecond}) // the flood holds the linger to its end
		c := dialRaw(t, addr, nil)
		h.waitOpen(t)
		empty := frame(0x00, nil)
		var flood []byte
		for range 4096 {
			flood = append(flood, empty...)
		}
		go func() {
			c.nc.Write(frame(0x01, []byte("a"))) // text, not final
			for {
				if _, err := c.nc.Write(flood); err != nil {
					return
				}
			}
		}()
		var pe *ProtocolError
		require.ErrorAs(t, h.waitClose(t), &pe)
		require.Equal(t, StatusPolicyViolation, pe.Code)
	})
}

// Empty fragments short of the bound, and an empty last one, are fine.
func TestEmptyFragmentsUnderTheBound(t *testing.T) {
	h := newRecorder()
	addr := startServer(t, h, nil)
	c := dialRaw(t, addr, nil)
	h.waitOpen(t)
	c.send(frame(0x01, []byte("a")))
	for range maxEmptyFrames {
		c.send(frame(0x00, nil))
	}
	c.send(frame(0x80, nil))
	h.expectMessage(t, OpText, []byte("a"))
}

// The bound a message in pieces set stays in place after it, for the
// messages that follow; when it fires on an idle connection, the handler's
// own deadline is what ends it, and at its time.
func TestReadDeadlineAfterAMessageInPieces(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		t.Parallel() // waits on timers: the modes wait side by side
		h := newRecorder()
		var start time.Time // when the connection opened: the test goroutine reads it after waitOpen
		h.open = func(c *Conn) {
			start = time.Now()
			c.SetReadDeadline(start.Add(800 * time.Millisecond))
		}
		addr := m.start(t, h, &Options{MessageTimeout: 200 * time.Millisecond})
		c := dialRaw(t, addr, nil)
		h.waitOpen(t)
		msg := frame(0x82, repeat("y", 50))
		c.send(msg[:10])
		time.Sleep(50 * time.Millisecond)
		c.send(msg[10:])
		h.expectMessage(t, OpBinary, repeat("y", 50))
		err := h.waitClose(t)
		took := time.Since(start)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		var pe *ProtocolError
		require.False(t, errors.As(err, &pe), "the read deadline, not the message's bound: %v", err)
		require.GreaterOrEqual(t, took, 800*time.Millisecond, "ended at %v, before the read deadline", took)
		require.Less(t, took, 3*time.Second)
	})
}
