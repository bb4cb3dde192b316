package gust

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/testkit"
)

// metricsLog is the tests' Metrics: it records every event.
type metricsLog struct {
	mu         sync.Mutex
	handshakes []int
	opened     int
	closes     []closeEvent
	received   []msgEvent
	sent       []msgEvent
	queued     int // the sum of Queued's n: messages waiting
	queuedIn   int // the sum of its positive n
	dropped    int
}

type closeEvent struct {
	code  StatusCode
	cause string
}

type msgEvent struct {
	op            Opcode
	payload, wire int
}

func (l *metricsLog) Handshake(status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handshakes = append(l.handshakes, status)
}

func (l *metricsLog) Opened(*Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opened++
}

func (l *metricsLog) Closed(_ *Conn, code StatusCode, cause string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.opened <= len(l.closes) {
		panic("Closed without Opened")
	}
	l.closes = append(l.closes, closeEvent{code, cause})
}

func (l *metricsLog) Received(_ *Conn, op Opcode, payload, wire int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.received = append(l.received, msgEvent{op, payload, wire})
}

func (l *metricsLog) Sent(_ *Conn, op Opcode, payload, wire int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, msgEvent{op, payload, wire})
}

func (l *metricsLog) Queued(_ *Conn, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queued += n
	if n > 0 {
		l.queuedIn += n
	}
}

func (l *metricsLog) Dropped(_ *Conn, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropped += n
}

func (l *metricsLog) getHandshakes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.handshakes)
}

func (l *metricsLog) getSent() []msgEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sent)
}

func (l *metricsLog) getReceived() []msgEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.received)
}

// waitClose waits for the first connection's Closed and checks that it was
// the only one, opened once.
func (l *metricsLog) waitClose(t *testing.T) closeEvent {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.closes) > 0
	}, 10*time.Second, time.Millisecond, "Closed was not reported")
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Equal(t, 1, l.opened)
	require.Len(t, l.closes, 1)
	return l.closes[0]
}

// waitHandshakes waits until n handshakes were reported and returns them.
func (l *metricsLog) waitHandshakes(t *testing.T, n int) []int {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.getHandshakes()) >= n }, 10*time.Second, time.Millisecond)
	return l.getHandshakes()
}

// Every way a connection ends reaches Closed once, with its code and cause,
// after one Opened; the handshake before it reports 101.
func TestMetricsCloseCauses(t *testing.T) {
	t.Parallel()
	quiet := newLogger(io.Discard)
	cases := []struct {
		name string
		opts Options
		open func(c *Conn)                                  // the server's OnOpen
		msg  func(c *Conn, m *Message)                      // the server's OnMessage
		peer func(t *testing.T, addr string, srv *recorder) // drives the client side
		want closeEvent
	}{
		{name: "peer close", want: closeEvent{4000, "peer"},
			peer: func(t *testing.T, addr string, _ *recorder) {
				c := dialRaw(t, addr, nil)
				c.send(frame(0x88, closePayload(4000, "bye")))
				c.expectClose(4000)
			}},
		{name: "local close", want: closeEvent{4001, "local"},
			open: func(c *Conn) { c.Close(4001, "bye") },
			peer: func(t *testing.T, addr string, _ *recorder) { dialRaw(t, addr, nil).expectClose(4001) }},
		{name: "CloseNow", want: closeEvent{StatusAbnormalClosure, "local"},
			open: func(c *Conn) { c.CloseNow() },
			peer: func(t *testing.T, addr string, srv *recorder) { dialRaw(t, addr, nil); srv.waitClose(t) }},
		{name: "protocol error", want: closeEvent{StatusProtocolError, "protocol"},
			peer: func(t *testing.T, addr string, _ *recorder) {
				c := dialRaw(t, addr, nil)
				c.send(encodeFrame(0x81, []byte("unmasked"), false))
				c.expectClose(StatusProtocolError)
			}},
		{name: "invalid UTF-8", want: closeEvent{StatusInvalidFramePayloadData, "protocol"},
			peer: func(t *testing.T, addr string, _ *recorder) {
				c := dialRaw(t, addr, nil)
				c.send(frame(0x81, []byte{0xff}))
				c.expectClose(StatusInvalidFramePayloadData)
			}},
		{name: "too big", opts: Options{MaxMessageSize: 10}, want: closeEvent{StatusMessageTooBig, "limit"},
			peer: func(t *testing.T, addr string, _ *recorder) {
				c := dialRaw(t, addr, nil)
				c.send(frame(0x82, make([]byte, 100)))
				c.expectClose(StatusMessageTooBig)
			}},
		{name: "write timeout", opts: Options{WriteTimeout: 100 * time.Millisecond},
			want: closeEvent{StatusAbnormalClosure, "timeout"},
			open: func(c *Conn) {
				big := make([]byte, 1<<20)
				for i := 0; i < 1000 && c.WriteMessage(OpBinary, big) == nil; i++ {
				}
			},
			peer: func(t *testing.T, addr string, srv *recorder) { dialRaw(t, addr, nil); srv.waitClose(t) }}, // never reads
		{name: "close timeout", opts: Options{CloseTimeout: 100 * time.Millisecond},
			want: closeEvent{StatusNormalClosure, "timeout"}, // the code gust sent
			open: func(c *Conn) { c.Close(StatusNormalClosure, "") },
			peer: func(t *testing.T, addr string, srv *recorder) { dialRaw(t, addr, nil); srv.waitClose(t) }}, // never answers
		{name: "heartbeat unanswered", opts: Options{PingInterval: 50 * time.Millisecond, PingTimeout: 50 * time.Millisecond},
			want: closeEvent{StatusAbnormalClosure, "timeout"},                                                // cut without a close frame
			peer: func(t *testing.T, addr string, srv *recorder) { dialRaw(t, addr, nil); srv.waitClose(t) }}, // reads nothing, answers nothing
		{name: "panic", opts: Options{Logger: quiet}, want: closeEvent{StatusInternalError, "panic"},
			msg: func(*Conn, *Message) { panic("boom") },
			peer: func(t *testing.T, addr string, srv *recorder) {
				c := dialRaw(t, addr, nil)
				c.send(frame(0x81, []byte("x")))
				b0, p, err := c.readFrame()
				require.NoError(t, err)
				require.Equal(t, byte(0x88), b0)
				require.Equal(t, closePayload(StatusInternalError, ""), p)
				srv.waitClose(t) // gust does not wait for the answer after a panic
			}},
		{name: "peer leaves", want: closeEvent{StatusAbnormalClosure, "io"},
			peer: func(t *testing.T, addr string, srv *recorder) {
				dialRaw(t, addr, nil).nc.Close()
				srv.waitClose(t)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachTCPMode(t, func(t *testing.T, m serverMode) {
				ml := &metricsLog{}
				opts := tc.opts
				opts.Metrics = ml
				h := newRecorder()
				h.open, h.message = tc.open, tc.msg
				h.opened = nil
				tc.peer(t, m.start(t, h, &opts), h)
				require.Equal(t, tc.want, ml.waitClose(t))
				require.Equal(t, []int{http.StatusSwitchingProtocols}, ml.getHandshakes())
			})
		})
	}
}

// Shutdown's close frame ends connections with the cause "shutdown" and
// 1001, whether the peer answers or Shutdown's context ends first; Close
// cuts them (1006); the client sees the server's 1001 as a peer's close.
func TestMetricsShutdown(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"answered", "cut after the deadline", "Close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ml, cl := &metricsLog{}, &metricsLog{}
			s := newServer(newRecorder(), &Options{Metrics: ml})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			runServer(t, s, ln)
			addr := ln.Addr().String()
			want := closeEvent{StatusGoingAway, "shutdown"}
			switch how {
			case "answered":
				dialTest(t, "ws://"+addr, &DialOptions{Options: Options{Metrics: cl}})
				require.Eventually(t, func() bool { return ml.waitOpened() }, 5*time.Second, time.Millisecond)
				require.NoError(t, s.Shutdown(testContext(t)))
				require.Equal(t, closeEvent{StatusGoingAway, "peer"}, cl.waitClose(t))
				require.Equal(t, []int{http.StatusSwitchingProtocols}, cl.getHandshakes())
			case "cut after the deadline":
				dialRaw(t, addr, nil) // never answers
				require.Eventually(t, func() bool { return ml.waitOpened() }, 5*time.Second, time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				require.ErrorIs(t, s.Shutdown(ctx), context.DeadlineExceeded)
			case "Close":
				dialRaw(t, addr, nil)
				require.Eventually(t, func() bool { return ml.waitOpened() }, 5*time.Second, time.Millisecond)
				require.NoError(t, s.Close())
				want.code = StatusAbnormalClosure
			}
			require.Equal(t, want, ml.waitClose(t))
		})
	}
}

func (l *metricsLog) waitOpened() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opened > 0
}

// Handshakes report their status on both server paths, refused or not, and
// on the client, once per Dial.
func TestMetricsHandshake(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		ml := &metricsLog{}
		addr := m.serve(t, newRecorder(), &Options{Metrics: ml}, func(u *Upgrader) {
			u.CheckOrigin = func(r *http.Request) bool { return r.Header.Get("Origin") != "http://evil.example" }
		})
		request := func(req string) int {
			nc := dialNet(t, addr)
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			c := &rawClient{t: t, nc: nc, br: newBufReader(nc)}
			return c.rawRequest(req).StatusCode
		}
		require.Equal(t, http.StatusForbidden, request(handshakeRequest(addr, "Origin: http://evil.example")))
		noKey := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"
		require.Equal(t, http.StatusBadRequest, request(noKey))
		require.Equal(t, http.StatusUpgradeRequired, request(strings.Replace(handshakeRequest(addr), "Version: 13", "Version: 8", 1)))
		require.ElementsMatch(t, []int{403, 400, 426}, ml.waitHandshakes(t, 3))

		// The client reports what its Dials ended with.
		cl := &metricsLog{}
		url, base := modeURL(t, m, addr, "")
		dopts := &DialOptions{Options: Options{Metrics: cl}, Header: http.Header{"Origin": {"http://evil.example"}}, TLSConfig: base.TLSConfig}
		_, _, err := Dial(testContext(t), url, nil, dopts)
		require.Error(t, err)
		dialTest(t, url, &DialOptions{Options: Options{Metrics: cl}, TLSConfig: base.TLSConfig})
		require.Equal(t, []int{403, 101}, cl.getHandshakes())
		require.ElementsMatch(t, []int{403, 400, 426, 403, 101}, ml.waitHandshakes(t, 5))

		if m.path == "server" {
			// A client that sends part of a request and leaves fails its
			// handshake without a status; one that sends nothing is not a
			// handshake.
			for _, sent := range []string{"GET / HTTP/1.1\r\n", ""} {
				nc, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				io.WriteString(nc, sent)
				nc.Close()
			}
			require.ElementsMatch(t, []int{403, 400, 426, 403, 101, 0}, ml.waitHandshakes(t, 6))
			time.Sleep(50 * time.Millisecond)
			require.Len(t, ml.getHandshakes(), 6)
		}
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cl := &metricsLog{}
	_, _, err = Dial(testContext(t), "ws://"+addr, nil, &DialOptions{Options: Options{Metrics: cl}})
	require.Error(t, err)
	require.Equal(t, []int{0}, cl.getHandshakes())
}

// Received and Sent report every data message with its size and the size
// of its frame's payload on the wire, smaller when compressed; every write
// path reports, corked writes and the outbox's included.
func TestMetricsMessagesAndBytes(t *testing.T) {
	t.Parallel()
	ml, cl := &metricsLog{}, &metricsLog{}
	comp := CompressionOptions{Enabled: true}
	srv := newEcho()
	addr := startServer(t, srv, &Options{Metrics: ml, Compression: comp})
	c, _, h := dialTest(t, "ws://"+addr, &DialOptions{Options: Options{Metrics: cl, Compression: comp}})
	require.True(t, c.Compressed())
	sc := srv.waitOpen(t)

	text := []byte(strings.Repeat("gust gust gust ", 1000)) // compressible
	require.NoError(t, c.WriteMessage(OpText, text))        // echoed, corked
	h.expectMessage(t, OpText, text)
	require.NoError(t, c.WriteMessage(OpBinary, []byte("hi"))) // under the threshold
	h.expectMessage(t, OpBinary, []byte("hi"))

	// Each side's compressor made its own frames: the sizes on the wire are
	// each under a tenth of the text.
	for _, events := range [][]msgEvent{ml.getReceived(), ml.getSent(), cl.getSent(), cl.getReceived()} {
		require.Len(t, events, 2)
		require.Equal(t, OpText, events[0].op)
		require.Equal(t, len(text), events[0].payload)
		require.Less(t, events[0].wire, len(text)/10, "compressed")
		require.Equal(t, msgEvent{OpBinary, 2, 2}, events[1])
	}
	require.Equal(t, ml.getSent(), cl.getReceived(), "the client received what the server sent, byte for byte")
	require.Equal(t, cl.getSent(), ml.getReceived())

	// Every write path of the server.
	pm, err := NewPreparedMessage(OpText, text)
	require.NoError(t, err)
	small, err := NewPreparedMessage(OpBinary, []byte("pm"))
	require.NoError(t, err)
	require.NoError(t, sc.WriteString("ws"))
	require.NoError(t, sc.WriteUncompressed(OpText, text))
	require.NoError(t, sc.WriteJSON(map[string]int{"a": 1}))
	require.NoError(t, sc.WritePrepared(pm))
	require.NoError(t, sc.WritePrepared(small))
	done := make(chan error, 2)
	require.NoError(t, sc.WriteAsync(OpBinary, []byte("async"), func(err error) { done <- err }))
	require.NoError(t, sc.WritePreparedAsync(pm, func(err error) { done <- err }))
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	for range 7 {
		h.waitMessage(t)
	}
	sent := ml.getSent()[2:]
	require.Len(t, sent, 7)
	require.Equal(t, msgEvent{OpText, 2, 2}, sent[0])
	require.Equal(t, msgEvent{OpText, len(text), len(text)}, sent[1], "WriteUncompressed")
	require.Equal(t, msgEvent{OpText, 7, 7}, sent[2], `{"a":1}`)
	require.Equal(t, OpText, sent[3].op)
	require.Equal(t, len(text), sent[3].payload)
	require.Less(t, sent[3].wire, len(text)/10, "a prepared message, compressed")
	require.Equal(t, msgEvent{OpBinary, 2, 2}, sent[4])
	require.Equal(t, msgEvent{OpBinary, 5, 5}, sent[5])
	require.Equal(t, sent[3], sent[6], "a prepared message through the outbox")
	require.Equal(t, sent, cl.getReceived()[2:], "what the client received")
	ml.mu.Lock()
	queued, queuedIn, dropped := ml.queued, ml.queuedIn, ml.dropped
	ml.mu.Unlock()
	require.Equal(t, 0, queued)
	// Each went out at once from WriteAsync (an empty outbox), or through
	// the queue if the read goroutine held the write lock then.
	require.LessOrEqual(t, queuedIn, 2)
	require.Equal(t, 0, dropped)
}

// The outbox reports messages entering and leaving its queue, and those its
// policy refuses or discards.
func TestMetricsOutbox(t *testing.T) {
	for _, tc := range []struct {
		policy  OutboxPolicy
		dropped int
	}{
		{OutboxReject, 1}, {OutboxDropNewest, 1}, {OutboxDropOldest, 1}, {OutboxCloseSlow, 3},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			ml := &metricsLog{}
			c, g, h := startGated(t, &Options{OutboxSize: 2, OutboxPolicy: tc.policy, Metrics: ml})
			c.WriteAsync(OpText, []byte("0"), nil)
			g.waitWrite(t) // the writer took "0" and waits at the gate
			c.WriteAsync(OpText, []byte("1"), nil)
			c.WriteAsync(OpText, []byte("2"), nil)
			c.WriteAsync(OpText, []byte("3"), nil) // the outbox is full
			ml.mu.Lock()
			require.Equal(t, tc.dropped, ml.dropped)
			waiting := 2 // "1" and "2", or "2" and "3"
			if tc.policy == OutboxCloseSlow {
				waiting = 0 // the queue was discarded
			}
			require.Equal(t, waiting, ml.queued)
			ml.mu.Unlock()
			g.open()
			if tc.policy == OutboxCloseSlow {
				g.in <- frame(0x88, closePayload(StatusPolicyViolation, ""))
				err := h.waitClose(t)
				h.closed <- err // for the cleanup
				require.Equal(t, closeEvent{StatusPolicyViolation, "slow"}, ml.waitClose(t))
			}
			require.Eventually(t, func() bool {
				ml.mu.Lock()
				defer ml.mu.Unlock()
				return ml.queued == 0
			}, 5*time.Second, time.Millisecond)
			want := 3 // reported written: "0" and the two kept
			if tc.policy == OutboxCloseSlow {
				want = 1
			}
			require.Eventually(t, func() bool { return len(ml.getSent()) == want }, 5*time.Second, time.Millisecond)
		})
	}
}

// countingMetrics counts events with atomics, as a real Metrics would: the
// benchmarks use it to show that a Metrics set costs no allocation.
type countingMetrics struct {
	events atomic.Int64
	bytes  atomic.Int64
}

func (m *countingMetrics) Handshake(int)                    { m.events.Add(1) }
func (m *countingMetrics) Opened(*Conn)                     { m.events.Add(1) }
func (m *countingMetrics) Closed(*Conn, StatusCode, string) { m.events.Add(1) }
func (m *countingMetrics) Received(_ *Conn, _ Opcode, payload, wire int) {
	m.events.Add(1)
	m.bytes.Add(int64(payload + wire))
}
func (m *countingMetrics) Sent(_ *Conn, _ Opcode, payload, wire int) {
	m.events.Add(1)
	m.bytes.Add(int64(payload + wire))
}
func (m *countingMetrics) Queued(*Conn, int)  { m.events.Add(1) }
func (m *countingMetrics) Dropped(*Conn, int) { m.events.Add(1) }

// With a Metrics set, receiving and sending allocate nothing more than
// without: a connection echoing 1000 messages costs the same allocations
// (its fixed ones) either way. BenchmarkEchoCorkedMetrics shows 0 allocs/op.
func TestMetricsCostNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	f := frame(0x81, repeat("a", 300))
	echo := func(m Metrics) float64 {
		return testing.AllocsPerRun(3, func() {
			c := newConn(newStreamConn(f, 1000), newConfig(Options{Metrics: m}, true), echoBench{}, true, nil, "")
			c.ReadLoop()
		})
	}
	m := &countingMetrics{}
	without, with := echo(nil), echo(m)
	require.Less(t, without, 100.0, "fixed costs only")
	require.LessOrEqual(t, with, without+10, "pools vary by a few; an allocation per message would add 1000")
	require.Equal(t, int64(4*2*1000*600), m.bytes.Load(), "each run received and sent 1000 messages of 300 bytes")
}

// At level Debug, Options.Logger gets one record per connection that ends,
// with the peer's address, the code and the cause as attributes; at the
// default level (Info), none.
func TestLoggerDebugRecordPerClose(t *testing.T) {
	t.Parallel()
	var debug, info testkit.Buffer
	for _, tc := range []struct {
		buf   *testkit.Buffer
		level slog.Level
	}{{&debug, slog.LevelDebug}, {&info, slog.LevelInfo}} {
		logger := slog.New(slog.NewTextHandler(tc.buf, &slog.HandlerOptions{Level: tc.level}))
		h := newRecorder()
		c := dialRaw(t, startServer(t, h, &Options{Logger: logger}), nil)
		c.send(frame(0x88, closePayload(4002, "done")))
		c.expectClose(4002)
		h.waitClose(t)
	}
	rec := debug.String()
	require.Contains(t, rec, `level=DEBUG msg="gust: connection closed"`)
	require.Regexp(t, `remote=127\.0\.0\.1:\d+ code=4002 cause=peer err=`, rec)
	require.Empty(t, info.String())
}

// Over HTTP/2 (RFC 8441), an accepted handshake is a 200 on both sides, and
// the connection reports as any other.
func TestMetricsHTTP2(t *testing.T) {
	t.Parallel()
	ml, cl := &metricsLog{}, &metricsLog{}
	addr := startH2(t, newEcho(), &Options{Metrics: ml})
	url, opts := dialH2Options(t, addr)
	opts.Options.Metrics = cl
	h := newRecorder()
	c, _, err := Dial(testContext(t), url, h, opts)
	require.NoError(t, err)
	go c.ReadLoop()
	require.NoError(t, c.WriteString("over h2"))
	h.expectMessage(t, OpText, []byte("over h2"))
	require.NoError(t, c.Close(StatusNormalClosure, ""))
	h.waitClose(t)
	require.Equal(t, closeEvent{StatusNormalClosure, "peer"}, ml.waitClose(t))
	require.Equal(t, closeEvent{StatusNormalClosure, "local"}, cl.waitClose(t))
	require.Equal(t, []int{http.StatusOK}, ml.getHandshakes())
	require.Equal(t, []int{http.StatusOK}, cl.getHandshakes())
	require.Equal(t, []msgEvent{{OpText, 7, 7}}, ml.getReceived())
	require.Equal(t, []msgEvent{{OpText, 7, 7}}, cl.getSent())
}
