package gust

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/stretchr/testify/require"
)

// streamed is a message a streamHandler read to its end.
type streamed struct {
	op       Opcode
	data     []byte
	streamed bool
	err      error
}

// newStreamRecorder is a recorder whose handler reads every message with
// Read, whole or streamed, and records what it read.
func newStreamRecorder() (*recorder, chan streamed) {
	got := make(chan streamed, recorderRoom)
	h := newRecorder()
	h.message = func(c *Conn, m *Message) {
		data, err := io.ReadAll(m)
		got <- streamed{m.Opcode, data, m.Streamed(), err}
		m.Close()
	}
	return h, got
}

func waitStreamed(t *testing.T, got chan streamed) streamed {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no message")
		return streamed{}
	}
}

// streamPair connects a gust client to a gust server, both with opts, and
// returns the client, the server's side of the connection and what each
// side's streaming handler reads.
func streamPair(t *testing.T, opts Options) (client, server *Conn, fromClient, fromServer chan streamed) {
	t.Helper()
	sh, fromClient := newStreamRecorder()
	addr := startServer(t, sh, &opts)
	ch, fromServer := newStreamRecorder()
	client, _, err := Dial(testContext(t), "ws://"+addr, ch, &DialOptions{Options: opts})
	require.NoError(t, err)
	runClient(t, client)
	return client, sh.waitOpen(t), fromClient, fromServer
}

// textOf returns n bytes of valid UTF-8 (ASCII and 2-byte runes, so that
// fragments split runes) that compress somewhat.
func textOf(r *rand.Rand, n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		if n-len(b) >= 2 && r.IntN(8) == 0 {
			b = append(b, "é"...)
		} else {
			b = append(b, byte('a'+r.IntN(20)))
		}
	}
	return b
}

func payloadOf(r *rand.Rand, op Opcode, n int) []byte {
	if op == OpText {
		return textOf(r, n)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sendInPieces sends p through NextWriter in writes of random sizes.
func sendInPieces(r *rand.Rand, c *Conn, op Opcode, p []byte) error {
	w, err := c.NextWriter(op)
	if err != nil {
		return err
	}
	for len(p) > 0 {
		k := min(len(p), 1+r.IntN(40<<10))
		if _, err := w.Write(p[:k]); err != nil {
			w.Close()
			return err
		}
		p = p[k:]
	}
	return w.Close()
}

func TestStreamRoundTrip(t *testing.T) {
	t.Parallel()
	const threshold = 4 << 10
	for _, compress := range []bool{false, true} {
		for _, parallel := range []int{0, 4} {
			t.Run(fmt.Sprintf("compress=%v/parallel=%d", compress, parallel), func(t *testing.T) {
				t.Parallel()
				opts := Options{StreamThreshold: threshold, Parallel: parallel, WriteBufferSize: 16 << 10}
				opts.Compression.Enabled = compress
				client, server, fromClient, fromServer := streamPair(t, opts)
				require.Equal(t, compress, client.Compressed())
				r := rand.New(rand.NewPCG(1, 2))
				for _, size := range []int{0, 100, threshold - 1, threshold, threshold + 1, 3*(16<<10) + 17, 300 << 10} {
					for _, op := range []Opcode{OpText, OpBinary} {
						for _, how := range []string{"WriteMessage", "NextWriter", "WriteFrom"} {
							p := payloadOf(r, op, size)
							for _, side := range []struct {
								name string
								from *Conn
								got  chan streamed
							}{{"client", client, fromClient}, {"server", server, fromServer}} {
								var err error
								switch how {
								case "WriteMessage":
									err = side.from.WriteMessage(op, p)
								case "NextWriter":
									err = sendInPieces(r, side.from, op, p)
								case "WriteFrom":
									var n int64
									n, err = side.from.WriteFrom(op, bytes.NewReader(p))
									require.Equal(t, int64(size), n)
								}
								require.NoError(t, err)
								s := waitStreamed(t, side.got)
								where := fmt.Sprintf("%s from the %s, %v, %d bytes", how, side.name, op, size)
								require.NoError(t, s.err, where)
								require.Equal(t, op, s.op, where)
								require.True(t, bytes.Equal(p, s.data), where)
								if size > threshold {
									require.True(t, s.streamed, where)
								} else if !compress || size < threshold/2 {
									require.False(t, s.streamed, where)
								}
							}
						}
					}
				}
			})
		}
	}
}

// TestStreamCompressedSmallOnTheWire: a message that compresses below the
// threshold and inflates past it is streamed too, and the window stays in
// step for the next message.
func TestStreamCompressedSmallOnTheWire(t *testing.T) {
	t.Parallel()
	opts := Options{StreamThreshold: 64 << 10, MaxMessageSize: -1}
	opts.Compression.Enabled = true
	client, _, fromClient, _ := streamPair(t, opts)
	big := bytes.Repeat([]byte("abcdefgh"), 1<<20) // 8 MiB, a few KiB deflated
	require.NoError(t, client.WriteMessage(OpText, big))
	s := waitStreamed(t, fromClient)
	require.NoError(t, s.err)
	require.True(t, s.streamed)
	require.True(t, bytes.Equal(big, s.data))
	require.NoError(t, client.WriteMessage(OpText, big[:1000]))
	s = waitStreamed(t, fromClient)
	require.False(t, s.streamed)
	require.Equal(t, big[:1000], s.data)
}

// streamingServer serves raw clients with a handler that runs read on each
// message.
func streamingServer(t *testing.T, opts *Options, read func(c *Conn, m *Message)) (*recorder, *rawClient) {
	t.Helper()
	h := newRecorder()
	h.message = read
	return h, dialRaw(t, startServer(t, h, opts), nil)
}

func requireCode(t *testing.T, err error, code StatusCode) {
	t.Helper()
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, code, pe.Code)
}

// header encodes a masked client frame header announcing n bytes.
func header(b0 byte, n uint64, key [4]byte) []byte {
	h := []byte{b0, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0}
	for i := 0; i < 8; i++ {
		h[2+i] = byte(n >> (56 - 8*i))
	}
	return append(h, key[:]...)
}

func TestStreamInvalidUTF8FailsBeforeTheEnd(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	var read atomic.Int64
	h, c := streamingServer(t, &Options{StreamThreshold: 1024}, func(c *Conn, m *Message) {
		require.True(t, m.Streamed())
		n, err := io.Copy(io.Discard, m)
		read.Store(n)
		readErr <- err
	})
	p := repeat("a", 64<<10)
	p[40000] = 0xff
	c.send(frame(0x01, p)) // not final: the end never comes
	c.expectClose(StatusInvalidFramePayloadData)
	requireCode(t, <-readErr, StatusInvalidFramePayloadData)
	require.Less(t, read.Load(), int64(40001))
	requireCode(t, h.waitClose(t), StatusInvalidFramePayloadData)
}

func TestStreamOverMaxMessageSizeFailsWithoutBuffering(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	var read atomic.Int64
	h, c := streamingServer(t, &Options{StreamThreshold: 1024, MaxMessageSize: 256 << 10}, func(c *Conn, m *Message) {
		n, err := io.Copy(io.Discard, m)
		read.Store(n)
		readErr <- err
	})
	c.send(frame(0x02, make([]byte, 100<<10)))
	c.send(header(0x00, 1<<20, [4]byte{1, 2, 3, 4}), []byte("abc")) // announced, never sent
	c.expectClose(StatusMessageTooBig)
	requireCode(t, <-readErr, StatusMessageTooBig)
	require.Equal(t, int64(100<<10), read.Load())
	requireCode(t, h.waitClose(t), StatusMessageTooBig)
}

func TestStreamHandlerReturningEarlyDiscardsTheRest(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"return", "close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			got := make(chan []byte, 2)
			h, c := streamingServer(t, &Options{StreamThreshold: 1024}, func(c *Conn, m *Message) {
				if !m.Streamed() {
					got <- bytes.Clone(m.Data)
					return
				}
				p := make([]byte, 10)
				_, err := io.ReadFull(m, p)
				require.NoError(t, err)
				if how == "close" {
					m.Close()
					_, err = m.Read(p)
					require.ErrorIs(t, err, errStreamOver)
				}
				got <- p
			})
			big := repeat("0123456789", 15<<10)
			c.send(frame(0x02, big[:50<<10]), frame(0x00, big[50<<10:100<<10]), frame(0x80, big[100<<10:]))
			c.send(frame(0x81, []byte("next")))
			require.Equal(t, big[:10], <-got)
			require.Equal(t, []byte("next"), <-got)
			c.send(frame(0x88, []byte{0x03, 0xe8}))
			var ce *CloseError
			require.ErrorAs(t, h.waitClose(t), &ce)
		})
	}
}

// TestStreamCompressedReturningEarly: what a handler leaves of a
// compressed stream is inflated all the same, so that the next message,
// which refers back into it, inflates right.
func TestStreamCompressedReturningEarly(t *testing.T) {
	t.Parallel()
	opts := Options{StreamThreshold: 4 << 10}
	opts.Compression.Enabled = true
	got := make(chan []byte, 2)
	sh := newRecorder()
	sh.message = func(c *Conn, m *Message) {
		p := make([]byte, 10)
		n, _ := m.Read(p)
		got <- p[:n]
	}
	addr := startServer(t, sh, &opts)
	client, _, err := Dial(testContext(t), "ws://"+addr, newRecorder(), &DialOptions{Options: opts})
	require.NoError(t, err)
	runClient(t, client)
	r := rand.New(rand.NewPCG(3, 4))
	big := textOf(r, 200<<10)
	_, err = client.WriteFrom(OpText, bytes.NewReader(big))
	require.NoError(t, err)
	require.NotEmpty(t, <-got)
	require.NoError(t, client.WriteMessage(OpText, big[len(big)-4000:])) // back-references into the first
	require.Equal(t, big[len(big)-4000:len(big)-3990], <-got)
}

func TestStreamPingBetweenFragmentsIsAnswered(t *testing.T) {
	t.Parallel()
	got := make(chan int, 1)
	_, c := streamingServer(t, &Options{StreamThreshold: 1024}, func(c *Conn, m *Message) {
		n, err := io.Copy(io.Discard, m)
		require.NoError(t, err)
		got <- int(n)
	})
	c.send(frame(0x02, make([]byte, 100<<10)), frame(0x89, []byte("p1")))
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b0, p, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x8A), b0)
	require.Equal(t, "p1", string(p))
	select {
	case <-got:
		t.Fatal("the handler returned before the message ended")
	default:
	}
	c.send(frame(0x80, make([]byte, 10)))
	require.Equal(t, 100<<10+10, <-got)
}

func TestStreamPeerCloseMidStream(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	h, c := streamingServer(t, &Options{StreamThreshold: 1024}, func(c *Conn, m *Message) {
		_, err := io.Copy(io.Discard, m)
		readErr <- err
	})
	c.send(frame(0x02, make([]byte, 10<<10)), frame(0x88, []byte{0x03, 0xe8, 'b', 'y', 'e'}))
	c.expectClose(StatusNormalClosure)
	var ce *CloseError
	require.ErrorAs(t, <-readErr, &ce)
	require.Equal(t, StatusNormalClosure, ce.Code)
	require.ErrorAs(t, h.waitClose(t), &ce)
	require.Equal(t, "bye", ce.Reason)
}

func TestStreamPeerGoneMidStream(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	var read atomic.Int64
	h, c := streamingServer(t, &Options{StreamThreshold: 1024}, func(c *Conn, m *Message) {
		_, err := io.Copy(writerFunc(func(p []byte) { read.Add(int64(len(p))) }), m)
		readErr <- err
	})
	c.send(frame(0x02, make([]byte, 10<<10))) // not the last frame: the message goes on
	require.Eventually(t, func() bool { return read.Load() == 10<<10 }, 5*time.Second, time.Millisecond)
	c.nc.Close()
	require.ErrorIs(t, <-readErr, io.ErrUnexpectedEOF)
	require.ErrorIs(t, h.waitClose(t), io.ErrUnexpectedEOF)
	select {
	case err := <-h.closed:
		t.Fatalf("OnClose called twice, then with %v", err)
	case <-time.After(50 * time.Millisecond):
	}
}

// heapInUse is the bytes of heap objects the runtime counts now.
func heapInUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// peakHeap samples heapInUse every millisecond until stop is closed and
// returns the highest value. Until then the GC runs once the heap has grown
// by a twentieth (GOGC=5): at the default it lets garbage grow as large as the
// live heap, and what the tests before left live would count as growth.
func peakHeap(stop chan struct{}) chan int64 {
	gcPercent := debug.SetGCPercent(5)
	peak := make(chan int64, 1)
	go func() {
		var max int64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if h := heapInUse(); h > max {
				max = h
			}
			select {
			case <-stop:
				debug.SetGCPercent(gcPercent)
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	return peak
}

// patternReader yields n bytes of a repeating, slightly varied pattern.
type patternReader struct{ n, off int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n-r.off)]
	for i := range p {
		x := r.off + int64(i)
		p[i] = byte(x*7 + x>>13)
	}
	r.off += int64(len(p))
	return len(p), nil
}

// TestStreamMemoryBound streams a large message between a gust client and
// a gust server in this process and checks that the heap stays within a
// few MiB of where it started: neither side holds the message. Not
// parallel, so that no other test's garbage counts.
func TestStreamMemoryBound(t *testing.T) {
	for _, tc := range []struct {
		compress bool
		size     int64
	}{{false, 64 << 20}, {true, 16 << 20}} {
		t.Run(fmt.Sprintf("compress=%v", tc.compress), func(t *testing.T) {
			opts := Options{StreamThreshold: 64 << 10, MaxMessageSize: -1}
			opts.Compression.Enabled = tc.compress
			got := make(chan int64, 1)
			sh := newRecorder()
			sh.message = func(c *Conn, m *Message) {
				n, err := io.Copy(io.Discard, m)
				if err != nil || !m.Streamed() {
					n = -1
				}
				got <- n
			}
			addr := startServer(t, sh, &opts)
			client, _, err := Dial(testContext(t), "ws://"+addr, newRecorder(), &DialOptions{Options: opts})
			require.NoError(t, err)
			runClient(t, client)
			require.NoError(t, client.WriteMessage(OpBinary, []byte("warm up")))
			require.Equal(t, int64(-1), <-got)

			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			allocated := ms.TotalAlloc
			base := heapInUse()
			stop := make(chan struct{})
			peak := peakHeap(stop)
			n, err := client.WriteFrom(OpBinary, &patternReader{n: tc.size})
			require.NoError(t, err)
			require.Equal(t, tc.size, n)
			select {
			case n = <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("the message did not arrive")
			}
			close(stop)
			require.Equal(t, tc.size, n)
			grew := <-peak - base
			runtime.ReadMemStats(&ms)
			t.Logf("heap grew by %.1f MiB at most (from %.1f MiB) for a %d MiB message; %.1f MiB allocated meanwhile",
				float64(grew)/(1<<20), float64(base)/(1<<20), tc.size>>20, float64(ms.TotalAlloc-allocated)/(1<<20))
			// The bound leaves room for the garbage the GC lets pile up
			// (a twentieth of the live heap, peakHeap): a held message would be
			// 16 or 64 MiB.
			require.Less(t, grew, int64(8<<20))
		})
	}
}

// TestStreamHugeFrameAnnouncedByteByByte: a peer that announces a huge
// frame and sends it a byte at a time makes gust allocate by what arrives,
// not by the header.
func TestStreamHugeFrameAnnouncedByteByByte(t *testing.T) {
	got := make(chan int64, 1)
	var read atomic.Int64
	_, c := streamingServer(t, &Options{StreamThreshold: 64 << 10, MaxMessageSize: -1}, func(c *Conn, m *Message) {
		n, _ := io.Copy(writerFunc(func(p []byte) { read.Add(int64(len(p))) }), m)
		got <- n
	})
	runtime.GC()
	base := heapInUse()
	stop := make(chan struct{})
	peak := peakHeap(stop)
	key := [4]byte{9, 8, 7, 6}
	c.send(header(0x82, 1<<40, key))
	for i := range 2000 {
		c.send([]byte{byte(i) ^ key[i&3]})
	}
	require.Eventually(t, func() bool { return read.Load() == 2000 }, 5*time.Second, time.Millisecond)
	close(stop)
	grew := <-peak - base
	t.Logf("heap grew by %d KiB (from %d KiB)", grew>>10, base>>10)
	// An allocation by the header would be a TiB, or 16 MiB from the
	// pool; the bound leaves room for the garbage the GC lets pile up (a
	// tenth of the live heap, peakHeap).
	require.Less(t, grew, int64(8<<20))
	c.nc.Close()
	require.Equal(t, int64(2000), <-got)
}

// FuzzStreamedRead runs the same bytes through a server-side Conn twice:
// with every message whole, and with Options.StreamThreshold set and each
// message read with Read in pieces of random size. Both runs must deliver
// the same messages, answer with the same frames and end with the same
// error: streaming changes how a message is handed over, never what is
// accepted.
func FuzzStreamedRead(f *testing.F) {
	f.Add(append(frame(0x01, []byte("hel")), frame(0x80, []byte("lo"))...), uint64(3))
	f.Add(append(append(frame(0x02, make([]byte, 300)), frame(0x89, []byte("p"))...), frame(0x80, make([]byte, 200))...), uint64(70))
	f.Add(append(frame(0x01, []byte("a\xc3")), frame(0x80, []byte("\xa9b"))...), uint64(1))
	f.Add(frame(0xc1, []byte{0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00}), uint64(17)) // "Hello", compressed
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		var opts Options
		deflate := seed&16 != 0
		threshold := 1 + int(seed>>5)%300
		whole := runDifferential(t, in, seed, opts, deflate)
		opts.StreamThreshold = threshold
		streamed := runDifferential(t, in, seed, opts, deflate)
		require.Equal(t, whole.msgs, streamed.msgs, "messages")
		var pe *ProtocolError
		if deflate && errors.As(streamed.err, &pe) && (pe.Code == StatusInvalidFramePayloadData || pe.Code == StatusMessageTooBig) {
			// A stream inflates a compressed message as it comes, and may
			// find bad deflate data, bad text or too many bytes before
			// its last frame, where a whole message's are found after it:
			// failing early is the stream's right.
			return
		}
		require.Equal(t, whole.out, streamed.out, "frames sent")
		require.Equal(t, errorClass(whole.err), errorClass(streamed.err), "why the connection ended")
	})
}

type differentialRun struct {
	msgs []string // op:data of each message read to its end
	out  []byte
	err  error
}

// runDifferential runs a server Conn over in, served in pieces cut by
// seed, with permessage-deflate (context takeover) when compressed is set.
func runDifferential(t *testing.T, in []byte, seed uint64, opts Options, compressed bool) differentialRun {
	rng := rand.New(rand.NewPCG(seed, uint64(len(in))))
	fc := &fuzzConn{in: bytes.Clone(in), rng: rng, step: []int{1, 7, 64, 1024}[seed%4]}
	var run differentialRun
	h := &fuzzRecorder{t: t}
	mh := &differentialHandler{fuzzRecorder: h, rng: rand.New(rand.NewPCG(seed, 1)), run: &run}
	opts.MaxMessageSize = fuzzMaxMessage
	opts.DisableRecovery = true
	c := newConn(fc, newConfig(opts, true), mh, true, nil, "")
	if compressed {
		useDeflate(c, deflate.Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15})
	}
	c.ReadLoop()
	require.Equal(t, 1, h.closes, "OnClose calls")
	run.out, run.err = fc.out.Bytes(), h.err
	return run
}

// differentialHandler reads every message with Read, in pieces of random
// size, and records those read to their end.
type differentialHandler struct {
	*fuzzRecorder
	rng *rand.Rand
	run *differentialRun
}

func (h *differentialHandler) OnMessage(_ *Conn, m *Message) {
	var data []byte
	buf := make([]byte, 1+h.rng.IntN(700))
	for {
		n, err := m.Read(buf[:1+h.rng.IntN(len(buf))])
		data = append(data, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return
		}
	}
	h.run.msgs = append(h.run.msgs, fmt.Sprintf("%v:%q", m.Opcode, data))
	m.Close()
}

// errorClass is what must not change between the runs: the close code gust
// sent, the peer's close code, or how the input ended.
func errorClass(err error) string {
	var pe *ProtocolError
	var ce *CloseError
	switch {
	case errors.As(err, &pe):
		return fmt.Sprint("protocol ", pe.Code)
	case errors.As(err, &ce):
		return fmt.Sprint("close ", ce.Code, " ", ce.Reason)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "EOF"
	}
	return fmt.Sprint("other: ", err)
}

// TestStreamMetrics: a NextWriter's message is reported to Metrics.Sent
// once, at Close, and a streamed message to Metrics.Received once read to
// its end, with its size and its frames' payload bytes, compressed or not.
func TestStreamMetrics(t *testing.T) {
	t.Parallel()
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			t.Parallel()
			clientLog, serverLog := new(metricsLog), new(metricsLog)
			opts := Options{StreamThreshold: 4 << 10, WriteBufferSize: 8 << 10, Metrics: serverLog}
			opts.Compression.Enabled = compress
			sh, got := newStreamRecorder()
			addr := startServer(t, sh, &opts)
			copts := opts
			copts.Metrics = clientLog
			client, _, err := Dial(testContext(t), "ws://"+addr, newRecorder(), &DialOptions{Options: copts})
			require.NoError(t, err)
			runClient(t, client)
			p := textOf(rand.New(rand.NewPCG(7, 8)), 100<<10)
			n, err := client.WriteFrom(OpText, bytes.NewReader(p))
			require.NoError(t, err)
			require.Equal(t, int64(len(p)), n)
			s := waitStreamed(t, got)
			require.True(t, s.streamed)
			require.Equal(t, p, s.data)

			clientLog.mu.Lock()
			require.Len(t, clientLog.sent, 1)
			sent := clientLog.sent[0]
			clientLog.mu.Unlock()
			require.Equal(t, OpText, sent.op)
			require.Equal(t, len(p), sent.payload)
			if compress {
				require.Less(t, sent.wire, len(p))
			} else {
				require.Equal(t, len(p), sent.wire)
			}
			require.Eventually(t, func() bool {
				serverLog.mu.Lock()
				defer serverLog.mu.Unlock()
				return len(serverLog.received) == 1
			}, 5*time.Second, time.Millisecond)
			serverLog.mu.Lock()
			require.Equal(t, sent, serverLog.received[0])
			serverLog.mu.Unlock()
		})
	}
}

// TestStreamOverHTTP2: streaming both ways over WebSocket streams of
// HTTP/2 (RFC 8441), whose connections read through a small buffer and
// cannot wait for bytes without one.
func TestStreamOverHTTP2(t *testing.T) {
	t.Parallel()
	opts := Options{StreamThreshold: 4 << 10, WriteBufferSize: 16 << 10, Compression: CompressionOptions{Enabled: true}}
	sh, fromClient := newStreamRecorder()
	addr := startH2(t, sh, &opts)
	url, dopts := dialH2Options(t, addr)
	dopts.Options = opts
	ch, fromServer := newStreamRecorder()
	client, resp, err := Dial(testContext(t), url, ch, dopts)
	require.NoError(t, err)
	require.Equal(t, 2, resp.ProtoMajor)
	runClient(t, client)
	server := sh.waitOpen(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, side := range []struct {
		from *Conn
		got  chan streamed
	}{{client, fromClient}, {server, fromServer}} {
		p := payloadOf(r, OpBinary, 500<<10)
		_, err := side.from.WriteFrom(OpBinary, bytes.NewReader(p))
		require.NoError(t, err)
		s := waitStreamed(t, side.got)
		require.NoError(t, s.err)
		require.True(t, s.streamed)
		require.True(t, bytes.Equal(p, s.data))
	}
}

// TestStreamSilentPeerMidFrameIsCut: a peer that announces a large frame,
// sends part of it and goes silent (answering no ping) holds a streaming
// handler in Read only until the heartbeat cuts it: Read returns an error,
// and OnClose says the peer was silent.
func TestStreamSilentPeerMidFrameIsCut(t *testing.T) {
	t.Parallel()
	sh, got := newStreamRecorder()
	opts := &Options{StreamThreshold: 1 << 10, PingInterval: hbInterval, PingTimeout: hbTimeout}
	addr := startServer(t, sh, opts)
	rc := dialRaw(t, addr, nil)
	sh.waitOpen(t)

	key := [4]byte{1, 2, 3, 4}
	head := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0x10, 0, 0} // 1 MiB announced
	head = append(head, key[:]...)
	part := make([]byte, 8<<10) // 8 KiB sent: past the threshold, far short of the frame
	for i := range part {
		part[i] ^= key[i&3]
	}
	start := time.Now()
	rc.send(head, part)

	s := waitStreamed(t, got)
	require.True(t, s.streamed)
	require.Error(t, s.err, "Read must end when the peer is cut")
	require.Len(t, s.data, 8<<10)
	err := sh.waitClose(t)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, time.Since(start), hbInterval+hbTimeout+hbMargin)
}

// writerFunc is an io.Writer that hands what it is given to f.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) {
	f(p)
	return len(p), nil
}
