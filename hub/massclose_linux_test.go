package hub_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
	"github.com/gustws/gust/internal/selfsigned"
	"github.com/gustws/gust/internal/testkit"
)

// blockedCounter is a gust.Metrics that counts netpoll mode's "blocked"
// events (serving a connection held its event loop past 100 ms while a
// callback ran) and "held" ones (no callback ran) and ignores the rest.
type blockedCounter struct{ blocked, held atomic.Int64 }

func (m *blockedCounter) Handshake(int)                              {}
func (m *blockedCounter) Opened(*gust.Conn)                          {}
func (m *blockedCounter) Closed(*gust.Conn, gust.StatusCode, string) {}
func (m *blockedCounter) Received(*gust.Conn, gust.Opcode, int, int) {}
func (m *blockedCounter) Sent(*gust.Conn, gust.Opcode, int, int)     {}
func (m *blockedCounter) Queued(*gust.Conn, int)                     {}
func (m *blockedCounter) Dropped(*gust.Conn, int)                    {}

func (m *blockedCounter) Netpoll(_ *gust.Conn, event string) {
	switch event {
	case "blocked":
		m.blocked.Add(1)
	case "held":
		m.held.Add(1)
	}
}

// chatRooms does what examples/chat does with a Hub and a Presence: each
// connection subscribes to its room, joins the room's presence and watches
// it, each change queued to it as a message; OnClose stops the watch and
// leaves (the Hub's Wrap has removed the connection already).
type chatRooms struct {
	gust.BuiltinEventHandler
	hub      *hub.Hub
	presence *hub.LocalPresence
	rooms    int
	notice   *gust.PreparedMessage
	next     atomic.Int64
	open     atomic.Int64
}

type roomMember struct {
	room, name string
	stop       func()
}

func (a *chatRooms) OnOpen(c *gust.Conn) {
	i := a.next.Add(1)
	m := &roomMember{room: fmt.Sprintf("room-%d", i%int64(a.rooms)), name: fmt.Sprintf("user-%d", i)}
	c.Set("member", m)
	if err := a.hub.Subscribe(c, m.room); err != nil {
		panic(err)
	}
	if err := a.presence.Join(m.room, m.name); err != nil {
		panic(err)
	}
	stop, err := a.presence.Watch(m.room, func(e hub.PresenceEvent) {
		if e.Member != m.name {
			c.WritePreparedAsync(a.notice, nil) // fails once c is closing: that is fine
		}
	})
	if err != nil {
		panic(err)
	}
	m.stop = stop
	a.open.Add(1)
}

func (a *chatRooms) OnClose(c *gust.Conn, _ error) {
	v, _ := c.Get("member")
	m := v.(*roomMember)
	m.stop()
	if err := a.presence.Leave(m.room, m.name); err != nil {
		panic(err)
	}
	a.open.Add(-1)
}

// goingAway counts the clients' connections that the server closed with
// 1001.
type goingAway struct {
	gust.BuiltinEventHandler
	n *atomic.Int64
}

func (g goingAway) OnClose(_ *gust.Conn, err error) {
	if gust.CloseStatus(err) == gust.StatusGoingAway {
		g.n.Add(1)
	}
}

// Everyone leaving at once (issue 35): thousands of connections, held by a
// Hub through Wrap, each in one of 100 rooms of a LocalPresence that every
// member watches (examples/chat), close through one Shutdown. Their ends —
// Hub.Remove, the watch stopped, Leave and its events to the rest of the
// room — run on no event loop (no "blocked" event: the server's callbacks
// never hold a loop), every connection leaves the Hub and the Presence,
// and each client gets its 1001. A loop held with no callback running
// ("held": gust's own work, or a machine too busy to run the loop) is
// logged, not failed: with cores busy it happens. In both modes, with
// and without TLS, in a child process with one P (GOMAXPROCS=1, as in a
// container with one CPU), where the loops compete with every goroutine
// gust starts. In netpoll mode the shutdown starts a few goroutines, not
// some per connection: a goroutine each for the close frames and for the
// ends (the server's and the clients') started 6,400 to 7,900 for 2,000
// connections, and a loop that gave up its CPU waited behind them (in 2 of
// 6 runs with TLS, past 100 ms).
func TestShutdownEveryoneLeaves(t *testing.T) {
	if os.Getenv("GUST_TEST_EVERYONE_LEAVES") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestShutdownEveryoneLeaves$", "-test.count=1", "-test.v",
			fmt.Sprintf("-test.short=%v", testing.Short()))
		cmd.Env = append(os.Environ(), "GUST_TEST_EVERYONE_LEAVES=1", "GOMAXPROCS=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestShutdownEveryoneLeaves")
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "shutdown of") {
				t.Log(strings.TrimSpace(l))
			}
		}
		return
	}
	n := 2000
	if testing.Short() {
		n = 500 // a check that everyone leaves; the full run is the one that held loops
	}
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if need := uint64(2*n + 200); lim.Cur < need {
		t.Skipf("%d connections in one process need %d descriptors; the limit is %d", n, need, lim.Cur)
	}
	for _, netpoll := range []bool{false, true} {
		for _, useTLS := range []bool{false, true} {
			t.Run(fmt.Sprintf("netpoll=%v/tls=%v", netpoll, useTLS), func(t *testing.T) {
				everyoneLeaves(t, n, netpoll, useTLS)
			})
		}
	}
}

func everyoneLeaves(t *testing.T, n int, netpoll, useTLS bool) {
	h := new(hub.Hub)
	defer h.Close()
	notice, err := gust.NewPreparedMessage(gust.OpText, []byte(`{"type":"leave"}`))
	require.NoError(t, err)
	rooms := &chatRooms{hub: h, presence: hub.NewLocalPresence(), rooms: 100, notice: notice}
	m := &blockedCounter{}
	var logs testkit.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h.Wrap(rooms), Options: gust.Options{
		Netpoll: netpoll, Metrics: m, Logger: logger,
	}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "ws://" + ln.Addr().String() + "/"
	dialOpts := &gust.DialOptions{Options: gust.Options{Netpoll: true, Logger: logger}}
	served := make(chan error, 1)
	if useTLS {
		// X25519 alone: the hybrid post-quantum exchange would make the
		// handshakes, not the close, most of the test's time.
		cert, err := selfsigned.Cert(nil, "127.0.0.1")
		require.NoError(t, err)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: []tls.CurveID{tls.X25519}}
		go func() { served <- srv.ServeTLS(ln, "", "") }()
		url = "wss://" + ln.Addr().String() + "/"
		dialOpts.TLSConfig = &tls.Config{InsecureSkipVerify: true}
	} else {
		go func() { served <- srv.Serve(ln) }()
	}

	var away atomic.Int64
	var mu sync.Mutex
	var clients []*gust.Conn
	t.Cleanup(func() {
		for _, c := range clients {
			c.CloseNow()
		}
	})
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, _, err := gust.Dial(context.Background(), url, goingAway{n: &away}, dialOpts)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			go c.ReadLoop()
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	waitFor(t, "every connection open", 30*time.Second, func() bool { return rooms.open.Load() == int64(n) })
	require.Equal(t, n, h.Stats().Connections)
	require.Equal(t, hub.PresenceStats{Topics: 100, Members: n}, rooms.presence.Stats())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created := goroutinesCreated()
	start := time.Now()
	require.NoError(t, srv.Shutdown(ctx))
	took := time.Since(start)
	created = goroutinesCreated() - created
	require.ErrorIs(t, <-served, gust.ErrServerClosed)
	t.Logf("shutdown of %d connections (netpoll %v, tls %v) took %v, %d goroutines started, %d held", n, netpoll, useTLS, took.Round(time.Millisecond), created, m.held.Load())

	require.Zero(t, rooms.open.Load(), "every OnClose ran: %s", logs.String())
	require.Zero(t, h.Stats().Connections, "every connection left the Hub")
	require.Equal(t, hub.PresenceStats{}, rooms.presence.Stats(), "everyone left the presence")
	waitFor(t, "every client told 1001", 10*time.Second, func() bool { return away.Load() == int64(n) })
	require.Zero(t, m.blocked.Load(), "no callback held an event loop past 100 ms: %s", logs.String())
	if n := m.held.Load(); n > 0 {
		t.Logf("%d loop turns held past 100 ms with no callback running: %s", n, logs.String())
	}
	if netpoll {
		// A goroutine each for the close frames and for the ends (the
		// server's and the clients') put 3.5 to 4 per connection ahead of
		// the loops.
		require.Less(t, created, uint64(n/4), "goroutines started by the shutdown")
	}
}

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
