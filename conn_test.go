package gust

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// funcHandler lets a test supply only the callbacks it needs.
type funcHandler struct {
	BuiltinEventHandler
	open    func(c *Conn)
	message func(c *Conn, m *Message)
	closed  chan error
}

func newFuncHandler() *funcHandler { return &funcHandler{closed: make(chan error, 10)} }

func (h *funcHandler) OnOpen(c *Conn) {
	if h.open != nil {
		h.open(c)
	}
}

func (h *funcHandler) OnMessage(c *Conn, m *Message) {
	if h.message != nil {
		h.message(c, m)
		return
	}
	m.Close()
}

func (h *funcHandler) OnClose(c *Conn, err error) { h.closed <- err }

func (h *funcHandler) waitClose(t *testing.T) error {
	t.Helper()
	return waitErr(t, h.closed)
}

func TestCloseChecksCodeAndReason(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newFuncHandler()
		errs := make(chan []error, 1)
		h.open = func(c *Conn) {
			errs <- []error{
				c.Close(999, ""),
				c.Close(1004, ""),
				c.Close(1005, ""),
				c.Close(1006, ""),
				c.Close(1015, ""),
				c.Close(2999, ""),
				c.Close(5000, ""),
				c.Close(1000, string(repeat("x", 124))),
				c.Close(1000, "\xff"),
				c.Close(1001, "done"),
				c.WriteString("after close"),
				c.Close(1000, ""),
			}
		}
		c := dialRaw(t, m.start(t, h, nil), nil)
		got := <-errs
		for i := range 7 {
			require.ErrorIs(t, got[i], ErrInvalidCloseCode, "case %d", i)
		}
		require.ErrorIs(t, got[7], errControlTooLong)
		require.ErrorIs(t, got[8], errInvalidUTF8)
		require.NoError(t, got[9])
		require.ErrorIs(t, got[10], net.ErrClosed)
		require.ErrorIs(t, got[11], net.ErrClosed)
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, closePayload(1001, "done"), p)
		c.send(frame(0x88, closePayload(1001, "")))
		var ce *CloseError
		require.ErrorAs(t, h.waitClose(t), &ce)
		require.Equal(t, CloseError{Code: 1001, ByPeer: false}, *ce)
		require.Equal(t, "gust: closed, the peer answering with 1001 GoingAway", ce.Error())
	})
}

// TestEveryWireCodeReachesTheClient has the server close with codes that
// only a server sends (1001 going away, 1008 policy, 1011 internal error,
// 1012–1014) and an application code, each received by gust's client.
func TestEveryWireCodeReachesTheClient(t *testing.T) {
	for _, code := range []StatusCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4008, 4999} {
		t.Run(code.String(), func(t *testing.T) {
			h := newFuncHandler()
			h.open = func(c *Conn) { c.Close(code, "why") }
			addr := startServer(t, h, nil)
			in := newDialRecorder()
			c, _, err := Dial(testContext(t), "ws://"+addr, in, nil)
			require.NoError(t, err)
			runClient(t, c)
			var ce *CloseError
			require.ErrorAs(t, in.waitClose(t), &ce)
			require.Equal(t, CloseError{Code: code, Reason: "why", ByPeer: true}, *ce)
			require.ErrorAs(t, h.waitClose(t), &ce)
			require.Equal(t, CloseError{Code: code, ByPeer: false}, *ce)
		})
	}
}

func TestCloseNowCutsAtOnce(t *testing.T) {
	h := newOpenHandler()
	addr := startServer(t, h, &Options{WriteTimeout: time.Hour})
	raw := dialRaw(t, addr, nil) // never reads
	c := h.waitOpen(t)
	big := make([]byte, 1<<20)
	failed := blockWrites(t, func() error { return c.WriteMessage(OpBinary, big) })
	require.NoError(t, c.CloseNow())
	require.Error(t, <-failed)
	err := waitErr(t, h.closed)
	require.ErrorIs(t, err, net.ErrClosed)
	require.Contains(t, err.Error(), "CloseNow")
	require.ErrorIs(t, c.CloseNow(), net.ErrClosed)
	raw.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, raw.br) // what was sent, then the end: no close frame needed
	require.True(t, err == nil || isReset(err), "read: %v", err)
}

func TestCloseTimeoutWhenPeerNeverAnswers(t *testing.T) {
	h := newFuncHandler()
	h.open = func(c *Conn) { c.Close(1000, "") }
	c := dialRaw(t, startServer(t, h, &Options{CloseTimeout: 100 * time.Millisecond}), nil)
	_ = c
	err := h.waitClose(t)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
}

func TestWriteValidation(t *testing.T) {
	h := newFuncHandler()
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

func TestPingPongAndSession(t *testing.T) {
	h := &pingRecorder{pongs: make(chan string, 1)}
	c := dialRaw(t, startServer(t, h, nil), nil)
	c.send(frame(0x89, []byte("hello")))
	b0, p, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x8A), b0)
	require.Equal(t, "hello", string(p))
	c.send(frame(0x8A, []byte("unsolicited")))
	require.Equal(t, "ann:unsolicited", <-h.pongs)
}

type pingRecorder struct {
	BuiltinEventHandler
	pongs chan string
}

func (h *pingRecorder) OnOpen(c *Conn) {
	c.Set("user", "ann")
}

func (h *pingRecorder) OnPong(c *Conn, p []byte) {
	v, _ := c.Get("user")
	h.pongs <- v.(string) + ":" + string(p)
}

func TestConnValues(t *testing.T) {
	c := newConn(plainConn{}, newConfig(Options{}, true), BuiltinEventHandler{}, true, nil, "")
	_, ok := c.Get("a")
	require.False(t, ok)
	c.Set("a", 1)
	c.Set("b", 2)
	v, ok := c.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)
	c.Delete("a")
	_, ok = c.Get("a")
	require.False(t, ok)
	v, _ = c.Get("b")
	require.Equal(t, 2, v)
}

func TestPanicInCallbackClosesWith1011(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		for _, parallel := range []bool{false, true} {
			h := newFuncHandler()
			h.message = func(c *Conn, m *Message) { panic("boom") }
			var logged safeBuffer
			opts := &Options{ErrorLog: newLogger(&logged)}
			if parallel {
				opts.Parallel = 8
			}
			c := dialRaw(t, m.start(t, h, opts), nil)
			c.send(frame(0x81, []byte("x")))
			b0, p, err := c.readFrame()
			require.NoError(t, err)
			require.Equal(t, byte(0x88), b0)
			require.Equal(t, StatusInternalError, StatusCode(uint16(p[0])<<8|uint16(p[1])))
			var pe *PanicError
			require.ErrorAs(t, h.waitClose(t), &pe)
			require.Equal(t, "boom", pe.Value)
			require.Contains(t, string(pe.Stack), "panic")
			require.Contains(t, logged.String(), "boom")
		}
	})
}

func TestParallelHandlesConcurrently(t *testing.T) {
	h := newFuncHandler()
	var inflight, peak atomic.Int32
	release := make(chan struct{})
	h.message = func(c *Conn, m *Message) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inflight.Add(-1)
		c.WriteMessage(m.Opcode, m.Data)
		m.Close()
	}
	c := dialRaw(t, startServer(t, h, &Options{Parallel: 3}), nil)
	for i := 0; i < 6; i++ {
		c.send(frame(0x81, []byte("m")))
	}
	require.Eventually(t, func() bool { return peak.Load() == 3 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, int32(3), peak.Load(), "Options.Parallel bounds the handlers in flight")
	close(release)
	for i := 0; i < 6; i++ {
		c.expectMessage(OpText, []byte("m"))
	}
}

func TestWriteAsyncIsBounded(t *testing.T) {
	h := newFuncHandler()
	results := make(chan error, 100)
	queued := make(chan []error, 1)
	h.open = func(c *Conn) {
		var errs []error
		c.SetWriteDeadline(time.Now().Add(3 * time.Second))
		big := make([]byte, 8<<20) // the client does not read: the first write blocks
		for i := 0; i < 10; i++ {
			errs = append(errs, c.WriteAsync(OpBinary, big, func(err error) { results <- err }))
		}
		queued <- errs
	}
	dialRaw(t, startServer(t, h, &Options{WriteQueueSize: 4}), nil)
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
	h := newFuncHandler()
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

func TestShutdownSendsGoingAway(t *testing.T) {
	h := newEcho()
	s := newServer(h, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	clients := make([]*rawClient, 3)
	for i := range clients {
		clients[i] = dialRaw(t, ln.Addr().String(), nil)
		clients[i].send(frame(0x81, []byte("hi")))
		clients[i].expectMessage(OpText, []byte("hi"))
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for _, c := range clients {
		c.expectClose(StatusGoingAway)
	}
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-served, ErrServerClosed)
	for range clients {
		require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
	}
	require.ErrorIs(t, s.ListenAndServe("127.0.0.1:0"), ErrServerClosed)
}

func TestShutdownContextCutsSilentPeers(t *testing.T) {
	h := newEcho()
	s := newServer(h, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go s.Serve(ln)
	dialRaw(t, ln.Addr().String(), nil) // never answers the close frame
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, h.waitClose(t), ErrServerClosed)
}

func TestStatusCodeString(t *testing.T) {
	require.Equal(t, "NormalClosure", StatusNormalClosure.String())
	require.Equal(t, "StatusCode(4000)", StatusCode(4000).String())
	require.Equal(t, StatusCode(0), CloseStatus(errors.New("x")))
	require.Contains(t, (&CloseError{Code: 1000}).Error(), "1000")
	require.Contains(t, (&CloseError{Code: 4000, Reason: "r"}).Error(), `"r"`)
	require.Contains(t, (&ProtocolError{Code: 1002, Reason: "bad"}).Error(), "bad")
	for _, op := range []Opcode{opContinuation, OpText, OpBinary, opClose, opPing, opPong, 5} {
		require.NotEmpty(t, op.String())
	}
}
