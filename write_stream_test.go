package gust

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/gustws/gust/internal/wsframe"
	"github.com/stretchr/testify/require"
)

// TestNextWriterHoldsDataWritesAndLetsControlFramesThrough: while a
// NextWriter is open, WriteMessage and WriteAsync wait for its Close, a
// ping goes out between its fragments, and the peer sees each message whole
// and in a valid order.
func TestNextWriterHoldsDataWritesAndLetsControlFramesThrough(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	c := dialRaw(t, startServer(t, h, &Options{WriteBufferSize: 4 << 10}), nil)
	sc := h.waitOpen(t)
	w, err := sc.NextWriter(OpBinary)
	require.NoError(t, err)
	big := repeat("0123456789abcdef", 2<<10) // 32 KiB: 9 fragments
	_, err = w.Write(big[:20<<10])
	require.NoError(t, err)

	wrote := make(chan error, 1)
	go func() { wrote <- sc.WriteMessage(OpText, []byte("second")) }()
	queued := make(chan error, 1)
	require.NoError(t, sc.WriteAsync(OpText, []byte("third"), func(err error) { queued <- err }))
	require.NoError(t, sc.WritePing([]byte("between")))
	select {
	case err := <-wrote:
		t.Fatalf("WriteMessage returned %v while a NextWriter was open", err)
	case err := <-queued:
		t.Fatalf("WriteAsync's message went out (%v) while a NextWriter was open", err)
	case <-time.After(50 * time.Millisecond):
	}
	_, err = w.Write(big[20<<10:])
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.ErrorIs(t, w.Close(), net.ErrClosed)
	_, err = w.Write([]byte("x"))
	require.ErrorIs(t, err, net.ErrClosed)
	require.NoError(t, <-wrote)
	require.NoError(t, <-queued)

	var msg []byte
	fragments, pingAt := 0, -1
	for {
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		switch op := Opcode(b0 & 0x0f); {
		case op == opPing:
			require.Equal(t, "between", string(p))
			pingAt = fragments
			continue
		case fragments == 0:
			require.Equal(t, OpBinary, op)
		default:
			require.Equal(t, opContinuation, op)
		}
		fragments++
		msg = append(msg, p...)
		if b0&0x80 != 0 {
			break
		}
	}
	require.Equal(t, big, msg)
	require.Greater(t, fragments, 2)
	require.True(t, pingAt > 0 && pingAt < fragments, "the ping came after fragment %d of %d", pingAt, fragments)
	var rest []string
	for range 2 {
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x81), b0)
		rest = append(rest, string(p))
	}
	require.ElementsMatch(t, []string{"second", "third"}, rest)
}

func TestNextWriterOnAnEndedConnection(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	c := dialRaw(t, startServer(t, h, &Options{WriteBufferSize: 4 << 10}), nil)
	sc := h.waitOpen(t)
	w, err := sc.NextWriter(OpText)
	require.NoError(t, err)
	_, err = w.Write([]byte("started"))
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() { waiting <- sc.WriteMessage(OpText, []byte("waits")) }()
	c.nc.Close()
	h.waitClose(t)
	require.ErrorIs(t, <-waiting, net.ErrClosed)
	_, err = w.Write(make([]byte, 16<<10))
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, w.Close(), net.ErrClosed)
	_, err = sc.NextWriter(OpBinary)
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = sc.WriteFrom(OpBinary, bytes.NewReader(nil))
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = sc.NextWriter(opPing)
	require.ErrorIs(t, err, errBadOpcode)
}

// TestNextWriterFromOnMessage: a handler that streams each message back
// from OnMessage, while another goroutine queues messages on the same
// connection, deadlocks nowhere, and every message arrives intact.
func TestNextWriterFromOnMessage(t *testing.T) {
	t.Parallel()
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			t.Parallel()
			opts := Options{StreamThreshold: 8 << 10, WriteBufferSize: 8 << 10}
			opts.Compression.Enabled = compress
			sh := newRecorder()
			sh.open = func(c *Conn) {
				go func() {
					for i := range 50 {
						c.WriteAsync(OpText, []byte(fmt.Sprint("async ", i)), nil)
					}
				}()
			}
			sh.message = func(c *Conn, m *Message) {
				w, err := c.NextWriter(m.Opcode)
				if err != nil {
					return
				}
				io.Copy(w, m)
				w.Close()
			}
			addr := startServer(t, sh, &opts)
			ch, got := newStreamRecorder()
			client, _, err := Dial(testContext(t), "ws://"+addr, ch, &DialOptions{Options: opts})
			require.NoError(t, err)
			runClient(t, client)
			r := rand.New(rand.NewPCG(5, 6))
			var sent [][]byte
			for i := range 10 {
				p := payloadOf(r, OpBinary, r.IntN(100<<10))
				sent = append(sent, p)
				if i%2 == 0 {
					_, err = client.WriteFrom(OpBinary, bytes.NewReader(p))
				} else {
					err = client.WriteMessage(OpBinary, p)
				}
				require.NoError(t, err)
			}
			var echoes [][]byte
			asyncs := 0
			for len(echoes) < len(sent) || asyncs < 50 {
				s := waitStreamed(t, got)
				require.NoError(t, s.err)
				if s.op == OpText {
					asyncs++
					continue
				}
				echoes = append(echoes, s.data)
			}
			for i := range sent {
				require.True(t, bytes.Equal(sent[i], echoes[i]), "echo %d", i)
			}
		})
	}
}

// TestNextWriterCarriesHeartbeats: a heartbeat ping reaches a silent peer
// while a NextWriter is open, even with the outbox's writer waiting for
// that message with data queued before the ping, so a peer that answers
// pings is not cut during a long stream.
func TestNextWriterCarriesHeartbeats(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	c := dialRaw(t, startServer(t, h, &Options{
		// A long PingTimeout: the test's pongs may come late on a busy
		// machine, and a cut is not what is tested.
		WriteBufferSize: 4 << 10, PingInterval: 100 * time.Millisecond, PingTimeout: 10 * time.Second,
	}), nil)
	sc := h.waitOpen(t)
	w, err := sc.NextWriter(OpBinary)
	require.NoError(t, err)
	queued := make(chan error, 1)
	require.NoError(t, sc.WriteAsync(OpText, []byte("after"), func(err error) { queued <- err }))
	go func() {
		for range 15 {
			if _, err := w.Write(make([]byte, 4<<10)); err != nil {
				break
			}
			time.Sleep(40 * time.Millisecond)
		}
		w.Close()
	}()
	pings, n := 0, 0
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		b0, p, err := c.readFrame()
		require.NoError(t, err, "after %d bytes and %d pings", n, pings)
		if Opcode(b0&0x0f) == opPing {
			pings++
			c.send(frame(0x8A, p))
			continue
		}
		n += len(p)
		if b0&0x80 != 0 {
			break
		}
	}
	require.Equal(t, 15*4<<10, n)
	require.GreaterOrEqual(t, pings, 2)
	for { // the heartbeat goes on: a ping may come before the queued message
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		if Opcode(b0&0x0f) == opPing {
			c.send(frame(0x8A, p))
			continue
		}
		require.Equal(t, byte(0x81), b0)
		require.Equal(t, "after", string(p))
		break
	}
	require.NoError(t, <-queued)
}

// TestNextWriterCompressedFragmentsArriveAsWritten: with compression, each
// fragment carries what was written before it (the compressor is flushed
// at each), so a streaming peer reads the bytes of the fragments sent so
// far before the writer closes.
func TestNextWriterCompressedFragmentsArriveAsWritten(t *testing.T) {
	t.Parallel()
	opts := Options{StreamThreshold: 1024, WriteBufferSize: 8 << 10}
	opts.Compression.Enabled = true
	var read atomic.Int64
	done := make(chan error, 1)
	sh := newRecorder()
	sh.message = func(c *Conn, m *Message) {
		buf := make([]byte, 1000)
		for {
			n, err := m.Read(buf)
			read.Add(int64(n))
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
		}
	}
	addr := startServer(t, sh, &opts)
	client, _, err := Dial(testContext(t), "ws://"+addr, newRecorder(), &DialOptions{Options: opts})
	require.NoError(t, err)
	runClient(t, client)
	require.True(t, client.Compressed())
	w, err := client.NextWriter(OpText)
	require.NoError(t, err)
	frag := 8<<10 - wsframe.MaxHeaderSize
	p := textOf(rand.New(rand.NewPCG(9, 10)), 3*frag+1)
	_, err = w.Write(p)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return read.Load() >= int64(3*frag) }, 10*time.Second, time.Millisecond,
		"the peer read %d of the %d bytes in the fragments sent", read.Load(), 3*frag)
	require.NoError(t, w.Close())
	require.NoError(t, <-done)
	require.Equal(t, int64(len(p)), read.Load())
}

// TestWriteFromFragmentBoundaries: WriteFrom reads its reader straight
// into the fragment buffer; messages that end on a fragment's edge or just
// past it, read in small and odd pieces, arrive whole, both sides,
// compressed or not.
func TestWriteFromFragmentBoundaries(t *testing.T) {
	t.Parallel()
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			t.Parallel()
			opts := Options{StreamThreshold: 1 << 10, WriteBufferSize: 4 << 10}
			opts.Compression.Enabled = compress
			client, server, fromClient, fromServer := streamPair(t, opts)
			w, err := client.NextWriter(OpBinary)
			require.NoError(t, err)
			frag := w.(*messageWriter).frag
			require.NoError(t, w.Close())
			s := waitStreamed(t, fromClient)
			require.NoError(t, s.err)
			require.Empty(t, s.data)
			r := rand.New(rand.NewPCG(3, 4))
			for _, size := range []int{frag - 1, frag, frag + 1, 2 * frag, 3*frag + 5} {
				for _, side := range []struct {
					from *Conn
					got  chan streamed
				}{{client, fromClient}, {server, fromServer}} {
					p := payloadOf(r, OpBinary, size)
					n, err := side.from.WriteFrom(OpBinary, iotest.HalfReader(bytes.NewReader(p)))
					require.NoError(t, err)
					require.Equal(t, int64(size), n)
					s := waitStreamed(t, side.got)
					require.NoError(t, s.err, "%d bytes", size)
					require.True(t, bytes.Equal(p, s.data), "%d bytes", size)
				}
			}
		})
	}
}

// TestNextWriterToAPeerThatNeverReads: WriteTimeout bounds a NextWriter's
// writes too: a peer that stops reading ends the connection, and Write
// returns an error wrapping os.ErrDeadlineExceeded, with a bounded wait.
func TestNextWriterToAPeerThatNeverReads(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	addr := startServer(t, srv, &Options{WriteTimeout: 200 * time.Millisecond})
	dialRaw(t, addr, nil) // never reads
	c := srv.waitOpen(t)

	w, err := c.NextWriter(OpBinary)
	require.NoError(t, err)
	chunk := make([]byte, 64<<10)
	start := time.Now()
	for written := 0; written < 1<<30; written += len(chunk) {
		if _, err = w.Write(chunk); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Error(t, w.Close())
	require.ErrorIs(t, srv.waitClose(t), os.ErrDeadlineExceeded)
}
