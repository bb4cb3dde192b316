//go:build linux

package gust

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The netpoll modes of serverModes run the wire tests in netpoll mode; these
// check what is its own: idle connections hold no goroutine, ReadLoop
// returns, and whatever ends a parked connection reaches OnClose.

// goroutinesIn counts the goroutines whose stacks contain fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// Idle connections in netpoll mode hold no goroutine of gust's (and so no
// ReadLoop), yet every one of them still echoes, and the event loop ends
// with the last connection.
func TestNetpollIdleConnectionsHoldNoGoroutine(t *testing.T) {
	for _, m := range serverModes {
		if !strings.HasSuffix(m.name, "-netpoll") {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			h := newEcho()
			addr := m.start(t, h, nil)
			const n = 50
			clients := make([]*rawClient, n)
			for i := range clients {
				clients[i] = dialRaw(t, addr, nil)
				h.waitOpen(t)
			}
			require.Eventually(t, func() bool { return goroutinesIn("gust.(*Conn).serve") == 0 },
				5*time.Second, 10*time.Millisecond, "idle connections still have a read goroutine")
			require.LessOrEqual(t, goroutinesIn("gust.(*poller).loop"), 1, "one event loop")
			for i, c := range clients {
				c.send(frame(0x81, []byte("hello")))
				c.expectMessage(OpText, []byte("hello"))
				if i%2 == 0 { // and again, after parking once more
					c.send(frame(0x82, []byte{byte(i)}))
					c.expectMessage(OpBinary, []byte{byte(i)})
				}
			}
			for _, c := range clients {
				c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
				c.expectClose(StatusNormalClosure)
				var ce *CloseError
				require.ErrorAs(t, h.waitClose(t), &ce)
				require.Equal(t, StatusNormalClosure, ce.Code)
			}
			require.Eventually(t, func() bool { return goroutinesIn("gust.(*poller).loop") == 0 },
				5*time.Second, 10*time.Millisecond, "the event loop outlived its connections")
		})
	}
}

// In netpoll mode ReadLoop returns once the connection is idle; OnClose
// comes later, once, from the goroutine that sees the end.
func TestNetpollReadLoopReturns(t *testing.T) {
	t.Parallel()
	h := newEcho()
	u := newUpgrader(h, &Options{Netpoll: true})
	returned := make(chan *Conn, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
		returned <- c
	}))
	t.Cleanup(ts.Close)
	c := dialRaw(t, ts.Listener.Addr().String(), nil)
	var conn *Conn
	select {
	case conn = <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("ReadLoop did not return for an idle connection in netpoll mode")
	}
	c.send(frame(0x81, []byte("after")))
	c.expectMessage(OpText, []byte("after"))
	require.NoError(t, conn.Close(StatusGoingAway, "bye"))
	c.expectClose(StatusGoingAway)
	var ce *CloseError
	require.ErrorAs(t, h.waitClose(t), &ce)
	require.Equal(t, StatusGoingAway, ce.Code)
	select {
	case err := <-h.closed:
		t.Fatalf("OnClose called twice: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
}

// Whatever ends a parked connection from outside (CloseNow, a close frame
// the peer never answers, a silent peer under heartbeats, a read deadline,
// Shutdown's cut) reaches OnClose, though no goroutine reads it.
func TestNetpollParkedConnectionsEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		end  func(c *Conn)
		want func(t *testing.T, err error)
	}{
		{"CloseNow", Options{}, func(c *Conn) { c.CloseNow() }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, net.ErrClosed)
		}},
		{"Close unanswered", Options{CloseTimeout: 100 * time.Millisecond}, func(c *Conn) {
			c.Close(StatusGoingAway, "")
		}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
		{"heartbeat", Options{PingInterval: 60 * time.Millisecond}, func(c *Conn) {}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
		{"read deadline", Options{}, func(c *Conn) {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}},
	}
	for _, tt := range tests {
		for _, m := range serverModes {
			if !strings.HasSuffix(m.name, "-netpoll") {
				continue
			}
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				h := newRecorder()
				opts := tt.opts
				dialRaw(t, m.start(t, h, &opts), nil) // a peer that sends nothing and answers nothing
				c := h.waitOpen(t)
				time.Sleep(20 * time.Millisecond) // parked by now
				start := time.Now()
				tt.end(c)
				tt.want(t, h.waitClose(t))
				require.Less(t, time.Since(start), 3*time.Second)
			})
		}
	}
}
