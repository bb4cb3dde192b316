package gust_test

// MIGRATING.md's ports, run: the code of migrating_test.go against real
// connections, so that what the guide recommends is shown to behave as it
// says.

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

// endings records, per remote address, how the server's connections ended.
type endings struct {
	gust.BuiltinEventHandler
	mu     sync.Mutex
	closed map[string]chan error
}

func (e *endings) ch(addr string) chan error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed == nil {
		e.closed = make(map[string]chan error)
	}
	ch := e.closed[addr]
	if ch == nil {
		ch = make(chan error, 1)
		e.closed[addr] = ch
	}
	return ch
}

func (e *endings) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	c.WriteMessage(m.Opcode, m.Data)
}

func (e *endings) OnClose(c *gust.Conn, err error) { e.ch(c.RemoteAddr().String()) <- err }

// serveGust serves h with opts on a loopback port until the test ends.
func serveGust(t *testing.T, h gust.Event, opts gust.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h, Options: opts}}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		require.ErrorIs(t, <-served, gust.ErrServerClosed)
	})
	return "ws://" + ln.Addr().String() + "/"
}

// gorillaDeadline is the port the guide used to recommend: gorilla's read
// deadline kept, moved on in OnOpen, OnPing and OnPong only.
type gorillaDeadline struct {
	*endings
	wait time.Duration
}

func (g gorillaDeadline) OnOpen(c *gust.Conn) { c.SetReadDeadline(time.Now().Add(g.wait)) }

func (g gorillaDeadline) OnPing(c *gust.Conn, p []byte) {
	c.SetReadDeadline(time.Now().Add(g.wait))
	c.WritePong(p)
}

func (g gorillaDeadline) OnPong(c *gust.Conn, _ []byte) { c.SetReadDeadline(time.Now().Add(g.wait)) }

// TestMigratingHeartbeatPort runs the guide's heartbeat port with the
// issue's figures (pong wait 3 s, ping period 2 s; a quarter of them under
// -short): a client that sends every 500 ms, and so is never pinged, stays
// connected well past the pong wait, and a silent client that does not
// answer pings is cut about one pong wait after it went quiet. The port
// the guide used to give, gorilla's read deadline kept and moved on by
// pings and pongs, is run too: it cuts the talking client at the pong wait.
func TestMigratingHeartbeatPort(t *testing.T) {
	t.Parallel()
	scale := time.Duration(1)
	if testing.Short() {
		scale = 4
	}
	pongWait, pingPeriod, every := 3*time.Second/scale, 2*time.Second/scale, 500*time.Millisecond/scale
	for _, mode := range []struct {
		name             string
		netpoll, gorilla bool
	}{{"goroutine", false, false}, {"netpoll", true, false}, {"gorilla-deadline-kept", false, true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			srv := &endings{}
			var h gust.Event = srv
			if mode.gorilla {
				h = gorillaDeadline{srv, pongWait}
			}
			opts := heartbeatOptions(pongWait, pingPeriod)
			opts.Netpoll = mode.netpoll
			url := serveGust(t, h, opts)

			// The silent client: connected, then nothing, pings unanswered.
			silent, _, err := gust.Dial(context.Background(), url, deaf{} /* example_test.go: never answers a ping */, nil)
			require.NoError(t, err)
			start := time.Now()
			go silent.ReadLoop()
			t.Cleanup(func() { silent.CloseNow() })

			// The talking client: a message every `every`, echoed back.
			active, _, err := gust.Dial(context.Background(), url, &endings{}, nil)
			require.NoError(t, err)
			go active.ReadLoop()
			t.Cleanup(func() { active.CloseNow() })
			tick := time.NewTicker(every)
			defer tick.Stop()
			silentEnd, activeEnd := srv.ch(silent.LocalAddr().String()), srv.ch(active.LocalAddr().String())
			var silentCut, activeCut time.Duration
			var activeErr error
			for stop := start.Add(pongWait * 3 / 2); time.Now().Before(stop); {
				select {
				case err := <-silentEnd:
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the silent client was cut by a deadline")
					silentCut, silentEnd = time.Since(start), nil
				case activeErr = <-activeEnd:
					activeCut, activeEnd = time.Since(start), nil
				case <-tick.C:
					if activeEnd != nil {
						require.NoError(t, active.WriteString("still here"))
					}
				}
			}
			if mode.gorilla {
				require.Error(t, activeErr, "gorilla's deadline, moved on by pongs alone, cuts a client that talks")
				require.ErrorIs(t, activeErr, os.ErrDeadlineExceeded)
				require.Less(t, activeCut, pongWait*3/2)
				return
			}
			require.NoError(t, activeErr, "the talking client was cut after %v", activeCut)
			if silentEnd != nil {
				select {
				case err := <-silentEnd:
					require.ErrorIs(t, err, os.ErrDeadlineExceeded)
					silentCut = time.Since(start)
				case <-time.After(5 * time.Second):
					t.Fatal("the silent client was not cut")
				}
			}
			// Cut one pong wait after the handshake, give or take the
			// timers' granularity (a quarter of the shorter setting) and
			// a loaded machine's delays.
			require.GreaterOrEqual(t, silentCut, pongWait*3/4, "the silent client was cut early")
			require.Less(t, silentCut, pongWait*3/2, "the silent client was cut late")
			require.NoError(t, active.Close(gust.StatusNormalClosure, ""))
			require.Equal(t, gust.StatusNormalClosure, gust.CloseStatus(<-activeEnd))
		})
	}
}
