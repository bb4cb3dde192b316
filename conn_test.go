package gust

import (
	"context"
	"errors"
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

func TestWriteCloseChecksCodesLikeBrowsers(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newFuncHandler()
		errs := make(chan []error, 1)
		h.open = func(c *Conn) {
			errs <- []error{
				c.WriteClose(1001, ""),
				c.WriteClose(2999, ""),
				c.WriteClose(5000, ""),
				c.WriteClose(1000, string(repeat("x", 124))),
				c.WriteClose(1000, "\xff"),
				c.WriteClose(4000, "done"),
				c.WriteString("after close"),
				c.WriteClose(1000, ""),
			}
		}
		c := dialRaw(t, m.start(t, h, nil), nil)
		got := <-errs
		require.ErrorIs(t, got[0], ErrInvalidCloseCode)
		require.ErrorIs(t, got[1], ErrInvalidCloseCode)
		require.ErrorIs(t, got[2], ErrInvalidCloseCode)
		require.ErrorIs(t, got[3], ErrControlTooLong)
		require.ErrorIs(t, got[4], ErrInvalidUTF8)
		require.NoError(t, got[5])
		require.ErrorIs(t, got[6], net.ErrClosed)
		require.ErrorIs(t, got[7], net.ErrClosed)
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x88), b0)
		require.Equal(t, closePayload(4000, "done"), p)
		c.send(frame(0x88, closePayload(4000, "")))
		require.Equal(t, StatusCode(4000), CloseStatus(h.waitClose(t)))
	})
}

func TestCloseTimeoutWhenPeerNeverAnswers(t *testing.T) {
	h := newFuncHandler()
	h.open = func(c *Conn) { c.WriteClose(1000, "") }
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
		errs <- []error{c.WriteMessage(OpPing, nil), c.WritePing(make([]byte, 126)), c.WritePong(make([]byte, 126)),
			c.WriteAsync(OpClose, nil, nil)}
	}
	dialRaw(t, startServer(t, h, nil), nil)
	got := <-errs
	require.Error(t, got[0])
	require.ErrorIs(t, got[1], ErrControlTooLong)
	require.ErrorIs(t, got[2], ErrControlTooLong)
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
	c.Session().Store("user", "ann")
}

func (h *pingRecorder) OnPong(c *Conn, p []byte) {
	v, _ := c.Session().Load("user")
	h.pongs <- v.(string) + ":" + string(p)
}

func TestSession(t *testing.T) {
	var s Session
	_, ok := s.Load("a")
	require.False(t, ok)
	s.Store("a", 1)
	s.Store("b", 2)
	v, ok := s.Load("a")
	require.True(t, ok)
	require.Equal(t, 1, v)
	n := 0
	s.Range(func(string, any) bool { n++; return false })
	require.Equal(t, 1, n)
	s.Delete("a")
	_, ok = s.Load("a")
	require.False(t, ok)
}

func TestPanicInCallbackClosesWith1011(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		for _, parallel := range []bool{false, true} {
			h := newFuncHandler()
			h.message = func(c *Conn, m *Message) { panic("boom") }
			var logged safeBuffer
			opts := &Options{ParallelEnabled: parallel, ErrorLog: newLogger(&logged)}
			c := dialRaw(t, m.start(t, h, opts), nil)
			c.send(frame(0x81, []byte("x")))
			b0, p, err := c.readFrame()
			require.NoError(t, err)
			require.Equal(t, byte(0x88), b0)
			require.Equal(t, StatusInternalError, StatusCode(uint16(p[0])<<8|uint16(p[1])))
			var pe *ProtocolError
			require.ErrorAs(t, h.waitClose(t), &pe)
			require.Equal(t, StatusInternalError, pe.Code)
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
	c := dialRaw(t, startServer(t, h, &Options{ParallelEnabled: true, ParallelLimit: 3}), nil)
	for i := 0; i < 6; i++ {
		c.send(frame(0x81, []byte("m")))
	}
	require.Eventually(t, func() bool { return peak.Load() == 3 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, int32(3), peak.Load(), "ParallelLimit bounds the handlers in flight")
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
	s := NewServer(h, nil)
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
	s := NewServer(h, nil)
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
	for _, op := range []Opcode{OpContinuation, OpText, OpBinary, OpClose, OpPing, OpPong, 5} {
		require.NotEmpty(t, op.String())
	}
}
