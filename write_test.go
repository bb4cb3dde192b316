package gust

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWriteValidation(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	errs := make(chan []error, 1)
	h.open = func(c *Conn) {
		errs <- []error{c.WriteMessage(opPing, nil), c.WritePing(make([]byte, 126)), c.WritePong(make([]byte, 126)),
			c.WriteAsync(opClose, nil, nil)}
	}
	dialRaw(t, startServer(t, h, nil), nil)
	got := <-errs
	require.Error(t, got[0])
	require.ErrorIs(t, got[1], errControlTooLong)
	require.ErrorIs(t, got[2], errControlTooLong)
	require.Error(t, got[3])
}

func TestWriteAsyncIsBounded(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	results := make(chan error, 100)
	queued := make(chan []error, 1)
	h.open = func(c *Conn) {
		var errs []error
		c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		big := make([]byte, 8<<20) // the client does not read: the first write blocks
		for i := 0; i < 10; i++ {
			errs = append(errs, c.WriteAsync(OpBinary, big, func(err error) { results <- err }))
		}
		queued <- errs
	}
	dialRaw(t, startServer(t, h, &Options{OutboxSize: 4}), nil)
	errs := <-queued
	full := 0
	for _, err := range errs {
		if errors.Is(err, ErrQueueFull) {
			full++
		} else {
			require.NoError(t, err)
		}
	}
	require.GreaterOrEqual(t, full, 5, "at most the queue size plus the one being written are accepted")
	failed := 0
	for i := 0; i < len(errs)-full; i++ {
		if <-results != nil {
			failed++
		}
	}
	require.Positive(t, failed, "40 MiB cannot fit in the socket buffers: the blocked writes fail at the deadline")
}

func TestWriteAsyncDelivers(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	var wg sync.WaitGroup
	wg.Add(3)
	h.open = func(c *Conn) {
		for _, s := range []string{"a", "b", "c"} {
			require.NoError(t, c.WriteAsync(OpText, []byte(s), func(err error) {
				require.NoError(t, err)
				wg.Done()
			}))
		}
	}
	c := dialRaw(t, startServer(t, h, nil), nil)
	for _, s := range []string{"a", "b", "c"} {
		c.expectMessage(OpText, []byte(s))
	}
	wg.Wait()
}

func TestCorkedWritesFlushWhenTheBufferFills(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	opts := &Options{WriteBufferSize: 1024}
	srv := newServer(&corkFiller{h}, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c := dialRaw(t, ln.Addr().String(), nil)
	c.send(frame(0x81, []byte("go")))
	for _, n := range []int{600, 600, 600, 5000, 10} {
		c.expectMessage(OpBinary, bytes.Repeat([]byte{byte(n)}, n))
	}
}

// corkFiller answers a message with writes that overflow the cork buffer,
// one of them larger than the buffer.
type corkFiller struct{ *recorder }

func (h *corkFiller) OnMessage(c *Conn, m *Message) {
	m.Close()
	for _, n := range []int{600, 600, 600, 5000, 10} {
		if err := c.WriteMessage(OpBinary, bytes.Repeat([]byte{byte(n)}, n)); err != nil {
			panic(err)
		}
	}
}

func TestWriteErrorsReachOnClose(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		h := newRecorder()
		writeErr := make(chan error, 1)
		h.open = func(c *Conn) {
			c.SetWriteDeadline(time.Now().Add(-time.Second))
			writeErr <- c.WriteString("too late")
		}
		dialRaw(t, startServer(t, h, nil), nil)
		require.ErrorIs(t, <-writeErr, os.ErrDeadlineExceeded)
		require.ErrorIs(t, h.waitClose(t), os.ErrDeadlineExceeded, "OnClose gets the write error, not the read error it caused")
	})
	// A write corked during a callback fails when the read loop flushes it.
	for _, wrap := range []bool{false, true} {
		t.Run(fmt.Sprintf("corked/plainConn=%v", wrap), func(t *testing.T) {
			peer, nc := tcpPair(t)
			h := newRecorder()
			var conn net.Conn = nc
			if wrap {
				conn = plainConn{nc} // reads through net.Conn.Read, not the netpoller
			}
			c := newConn(conn, newConfig(Options{}, true), &lateWriter{h}, true, nil, "")
			go c.ReadLoop()
			_, err := peer.Write(frame(0x81, []byte("x")))
			require.NoError(t, err)
			require.ErrorIs(t, h.waitClose(t), os.ErrDeadlineExceeded)
			require.ErrorIs(t, c.WriteString("after"), os.ErrDeadlineExceeded, "write errors are sticky")
		})
	}
}

// lateWriter writes its answer with a write deadline already past.
type lateWriter struct{ *recorder }

func (h *lateWriter) OnMessage(c *Conn, m *Message) {
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if err := c.WriteMessage(m.Opcode, m.Data); err != nil {
		panic(fmt.Sprintf("a corked write does not reach the network: %v", err))
	}
	m.Close()
}

func TestLargeServerFramesGoOutWhole(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1024, 4096, 64 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			h := newRecorder()
			srv := newServer(&patternWriter{h}, &Options{WriteBufferSize: size})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })

			c := dialRaw(t, ln.Addr().String(), nil)
			for _, n := range []int{size + 1, 3*size - 5, 200003} {
				c.send(frame(0x82, []byte(fmt.Sprint(n))))
				c.expectMessage(OpBinary, patterned(n))
			}
		})
	}
}

// patternWriter answers a message naming a size with patterned(size).
type patternWriter struct{ *recorder }

func (h *patternWriter) OnMessage(c *Conn, m *Message) {
	n, err := strconv.Atoi(string(m.Data))
	m.Close()
	if err != nil {
		panic(err)
	}
	if err := c.WriteMessage(OpBinary, patterned(n)); err != nil {
		panic(err)
	}
}

// patterned is n bytes that differ from their neighbours, so that a piece
// written twice, skipped or out of place changes the message.
func patterned(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i/251)
	}
	return p
}
