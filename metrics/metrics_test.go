package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/internal/leakcheck"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust"))
}

// echo writes every message back; ended receives each connection's end.
type echo struct {
	gust.BuiltinEventHandler
	ended chan error
}

func newEcho() *echo { return &echo{ended: make(chan error, 16)} }

func (e *echo) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data)
	m.Close()
}

func (e *echo) OnClose(_ *gust.Conn, err error) { e.ended <- err }

func (e *echo) waitEnd(t *testing.T) error {
	t.Helper()
	select {
	case err := <-e.ended:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("OnClose was not called")
		return nil
	}
}

// serve runs a gust.Server for h with opts on loopback until the test
// ends, and returns it with its ws:// URL; set, if not nil, sets more.
func serve(t *testing.T, h gust.Event, opts gust.Options, set func(*gust.Server)) (*gust.Server, string) {
	t.Helper()
	s := &gust.Server{}
	s.Upgrader.Handler, s.Upgrader.Options = h, opts
	if set != nil {
		set(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		require.ErrorIs(t, <-done, gust.ErrServerClosed)
	})
	return s, "ws://" + ln.Addr().String()
}

// dial connects a client with opts and runs its read loop until the test
// ends; the client echoes too.
func dial(t *testing.T, url string, h *echo, opts *gust.DialOptions) *gust.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := gust.Dial(ctx, url, h, opts)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		c.ReadLoop()
		close(done)
	}()
	t.Cleanup(func() {
		c.CloseNow()
		<-done
	})
	return c
}

// eventually waits until cond holds for the counters' snapshot.
func eventually(t *testing.T, c *Counters, cond func(s Snapshot) bool) Snapshot {
	t.Helper()
	require.Eventually(t, func() bool { return cond(c.Snapshot()) }, 10*time.Second, time.Millisecond,
		"counters: %s", c)
	return c.Snapshot()
}

func TestCountersHandshakesAndLiveConnections(t *testing.T) {
	t.Parallel()
	srv, cli := new(Counters), new(Counters)
	h := newEcho()
	_, url := serve(t, h, gust.Options{Metrics: srv}, func(s *gust.Server) {
		s.Upgrader.CheckOrigin = func(r *http.Request) bool { return r.Header.Get("Origin") == "" }
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := gust.Dial(ctx, url, nil, &gust.DialOptions{Options: gust.Options{Metrics: cli},
		Header: http.Header{"Origin": {"http://elsewhere.example"}}})
	var herr *gust.HandshakeError
	require.ErrorAs(t, err, &herr)
	require.Equal(t, http.StatusForbidden, herr.Status)

	a := dial(t, url, newEcho(), &gust.DialOptions{Options: gust.Options{Metrics: cli}})
	dial(t, url, newEcho(), &gust.DialOptions{Options: gust.Options{Metrics: cli}})
	s := eventually(t, srv, func(s Snapshot) bool { return s.Live == 2 })
	require.Equal(t, int64(2), s.HandshakesAccepted)
	require.Equal(t, int64(1), s.HandshakesRefused)
	require.Equal(t, int64(2), s.Opened)
	require.Equal(t, int64(0), s.Closed)
	c := eventually(t, cli, func(s Snapshot) bool { return s.Live == 2 })
	require.Equal(t, int64(2), c.HandshakesAccepted)
	require.Equal(t, int64(1), c.HandshakesRefused)

	require.NoError(t, a.Close(gust.StatusNormalClosure, ""))
	h.waitEnd(t)
	s = eventually(t, srv, func(s Snapshot) bool { return s.Closed == 1 })
	require.Equal(t, int64(1), s.Live)
	require.Equal(t, int64(1), s.ClosedBy[CausePeer])
	c = eventually(t, cli, func(s Snapshot) bool { return s.Closed == 1 })
	require.Equal(t, int64(1), c.ClosedBy[CauseLocal])
	require.Len(t, s.ClosedBy, len(Causes()), "every cause, at 0 when none ended so")
}

func TestCountersMessagesAndBytes(t *testing.T) {
	t.Parallel()
	srv, cli := new(Counters), new(Counters)
	comp := gust.CompressionOptions{Enabled: true}
	_, url := serve(t, newEcho(), gust.Options{Metrics: srv, Compression: comp}, nil)
	c := dial(t, url, newEcho(), &gust.DialOptions{Options: gust.Options{Metrics: cli, Compression: comp}})
	text := strings.Repeat("counted ", 1000)
	require.NoError(t, c.WriteString(text))
	require.NoError(t, c.WriteMessage(gust.OpBinary, []byte("tiny")))
	// The client echoes the server's echoes back, and so on: wait for a few
	// rounds and check the counts agree on both sides.
	s := eventually(t, srv, func(s Snapshot) bool { return s.MessagesIn >= 4 && s.MessagesOut >= 4 })
	require.GreaterOrEqual(t, s.BytesIn, int64(2*len(text)))
	require.GreaterOrEqual(t, s.BytesOut, int64(2*len(text)))
	require.Less(t, s.WireBytesIn, s.BytesIn/5, "compressed on the wire")
	require.Less(t, s.WireBytesOut, s.BytesOut/5, "compressed on the wire")
	require.Equal(t, int64(0), s.Queued)
	cs := cli.Snapshot()
	require.GreaterOrEqual(t, cs.MessagesOut, int64(2))
	require.GreaterOrEqual(t, cs.BytesOut, int64(len(text)+4))
}

func TestCountersCloseCauses(t *testing.T) {
	t.Parallel()
	srv := new(Counters)
	h := newEcho()
	s, url := serve(t, h, gust.Options{Metrics: srv, MaxMessageSize: 100}, nil)

	// limit: a message over MaxMessageSize.
	c := dial(t, url, newEcho(), nil)
	require.NoError(t, c.WriteMessage(gust.OpBinary, make([]byte, 1000)))
	var pe *gust.ProtocolError
	require.ErrorAs(t, h.waitEnd(t), &pe)
	eventually(t, srv, func(s Snapshot) bool { return s.ClosedBy[CauseLimit] == 1 })

	// io: a client that goes away without a close frame.
	c = dial(t, url, newEcho(), nil)
	require.NoError(t, c.CloseNow())
	h.waitEnd(t)
	eventually(t, srv, func(s Snapshot) bool { return s.ClosedBy[CauseIO] == 1 })

	// shutdown: the close frame Shutdown sends, answered.
	dial(t, url, newEcho(), nil)
	eventually(t, srv, func(s Snapshot) bool { return s.Live == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	h.waitEnd(t)
	snap := eventually(t, srv, func(s Snapshot) bool { return s.ClosedBy[CauseShutdown] == 1 })
	require.Equal(t, int64(3), snap.Closed)
	require.Equal(t, int64(0), snap.Live)
}

// A client that does not read fills the server's outbox: Queued counts what
// waits, QueuedTotal what entered, Dropped what OutboxReject refused; once the
// client reads, the outbox empties.
func TestCountersOutbox(t *testing.T) {
	t.Parallel()
	srv := new(Counters)
	conns := make(chan *gust.Conn, 1)
	h := &opener{echo: newEcho(), conns: conns}
	_, url := serve(t, h, gust.Options{Metrics: srv, OutboxSize: 4}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, _, err := gust.Dial(ctx, url, discard{}, nil)
	require.NoError(t, err)
	sc := <-conns

	big := make([]byte, 1<<20)
	refused := 0
	var accepted int64
	var done atomic.Int64
	for i := 0; i < 1000 && refused == 0; i++ {
		err := sc.WriteAsync(gust.OpBinary, big, func(error) { done.Add(1) })
		if errors.Is(err, gust.ErrQueueFull) {
			refused++
		} else {
			require.NoError(t, err)
			accepted++
		}
	}
	require.Equal(t, 1, refused, "the client reads nothing: the outbox fills")
	s := srv.Snapshot()
	require.Equal(t, int64(1), s.Dropped)
	require.Positive(t, s.Queued)
	require.GreaterOrEqual(t, s.QueuedTotal, s.Queued)

	readDone := make(chan struct{})
	go func() {
		client.ReadLoop()
		close(readDone)
	}()
	// Messages WriteAsync wrote at once, the outbox being empty, never
	// entered it: every accepted message went out, the queued ones among
	// them.
	s = eventually(t, srv, func(s Snapshot) bool { return s.Queued == 0 && done.Load() == accepted })
	require.Equal(t, accepted, s.MessagesOut)
	require.LessOrEqual(t, s.QueuedTotal, accepted)
	client.Close(gust.StatusNormalClosure, "")
	<-readDone
}

// opener hands each server Conn to the test as it opens.
type opener struct {
	*echo
	conns chan *gust.Conn
}

func (o *opener) OnOpen(c *gust.Conn) { o.conns <- c }

// discard drops every message.
type discard struct{ gust.BuiltinEventHandler }

// Counters is an expvar.Var: published, it is served as JSON on
// /debug/vars with the others.
func TestCountersExpvar(t *testing.T) {
	t.Parallel()
	c := new(Counters)
	name := fmt.Sprintf("gust_test_%d", time.Now().UnixNano()) // expvar names live as long as the process
	expvar.Publish(name, c)
	c.Handshake(101)
	c.Opened(nil)
	c.Received(nil, gust.OpText, 10, 4)
	c.Closed(nil, gust.StatusNormalClosure, CausePeer)
	c.Closed(nil, gust.StatusNormalClosure, "something new")

	ts := httptest.NewServer(expvar.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var vars map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &vars))
	var s Snapshot
	require.NoError(t, json.Unmarshal(vars[name], &s))
	require.Equal(t, int64(1), s.HandshakesAccepted)
	require.Equal(t, int64(2), s.Closed)
	require.Equal(t, int64(-1), s.Live, "two Closed for one Opened: the hook is fed by hand here")
	require.Equal(t, int64(10), s.BytesIn)
	require.Equal(t, int64(4), s.WireBytesIn)
	require.Equal(t, int64(1), s.ClosedBy[CausePeer])
	require.Equal(t, int64(1), s.ClosedBy["other"])
}

// Each event costs no allocation.
func TestCountersDoNotAllocate(t *testing.T) {
	c := new(Counters)
	allocs := testing.AllocsPerRun(100, func() {
		c.Handshake(101)
		c.Opened(nil)
		c.Received(nil, gust.OpText, 1, 1)
		c.Sent(nil, gust.OpText, 1, 1)
		c.Queued(nil, 1)
		c.Dropped(nil, 1)
		c.Closed(nil, gust.StatusNormalClosure, CauseTimeout)
		c.Netpoll(nil, NetpollBlocked)
	})
	require.Zero(t, allocs)
}

// Counters counts the events of the optional Netpoll method of
// gust.Metrics: gust finds the method, and a callback that holds an event
// loop is counted as "blocked".
func TestCountersNetpoll(t *testing.T) {
	t.Parallel()
	var m gust.Metrics = new(Counters)
	_, ok := m.(interface{ Netpoll(*gust.Conn, string) })
	require.True(t, ok, "the method gust looks for")

	c := new(Counters)
	c.Netpoll(nil, NetpollFallbackFD)
	c.Netpoll(nil, NetpollFallbackFD)
	c.Netpoll(nil, NetpollFallbackType)
	c.Netpoll(nil, NetpollHeld)
	c.Netpoll(nil, "something new")
	s := c.Snapshot()
	require.Equal(t, map[string]int64{NetpollFallbackFD: 2, NetpollFallbackType: 1, NetpollBlocked: 0, NetpollHeld: 1, "other": 1}, s.Netpoll)
	require.Contains(t, c.String(), `"netpoll":{`)

	if testing.Short() {
		return
	}
	c = new(Counters)
	h := &blocking{}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, url := serve(t, h, gust.Options{Netpoll: true, Metrics: c, Logger: quiet}, nil)
	client := dial(t, url, newEcho(), nil)
	// Until the connection is parked its first goroutine serves it, not a
	// loop: send until a message is served on the loop.
	require.Eventually(t, func() bool {
		require.NoError(t, client.WriteString("block"))
		time.Sleep(200 * time.Millisecond)
		return c.Snapshot().Netpoll[NetpollBlocked] > 0
	}, 10*time.Second, time.Millisecond)
}

// blocking sleeps 150 ms in OnMessage, holding its event loop in netpoll
// mode.
type blocking struct{ gust.BuiltinEventHandler }

func (blocking) OnMessage(_ *gust.Conn, m *gust.Message) {
	time.Sleep(150 * time.Millisecond)
	m.Close()
}
