package gust

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/pingwait"
	"github.com/stretchr/testify/require"
)

// TestPingRTT pings both ways between gust's client and server: each Ping
// gets its pong and a small positive round-trip time, and the pinging
// side's OnPong still sees the pong.
func TestPingRTT(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	pongs := make(chan []byte, 1)
	srv.pong = func(_ *Conn, p []byte) { pongs <- append([]byte(nil), p...) }
	addr := startServer(t, srv, nil)
	client, _, _ := dialTest(t, "ws://"+addr+"/", nil)
	sc := srv.waitOpen(t)

	for _, c := range []*Conn{client, sc} {
		rtt, err := c.Ping(testContext(t))
		require.NoError(t, err)
		require.Positive(t, rtt)
		require.Less(t, rtt, 5*time.Second)
	}
	require.Len(t, <-pongs, pingwait.PayloadSize, "OnPong sees the pong a Ping waited for")
}

func TestPingConcurrent(t *testing.T) {
	t.Parallel()
	addr := startServer(t, newRecorder(), nil)
	c, _, _ := dialTest(t, "ws://"+addr+"/", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Ping(testContext(t))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, c.pings.Waiting(), "every waiter is gone")
}

// TestPingDeadline pings a raw peer that reads the ping but never answers:
// Ping returns at ctx's deadline. The late pong then matches nothing, is
// ignored by Ping's mechanism and still reaches OnPong.
func TestPingDeadline(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	pongs := make(chan string, 1)
	srv.pong = func(_ *Conn, p []byte) { pongs <- string(p) }
	addr := startServer(t, srv, nil)
	rc := dialRaw(t, addr, nil)
	c := srv.waitOpen(t)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Ping(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	b0, p, err := rc.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x89), b0)
	require.Len(t, p, pingwait.PayloadSize)

	rc.send(frame(0x8A, p))
	require.Equal(t, string(p), <-pongs)
	require.Zero(t, c.pings.Waiting())

	_, err = c.Ping(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "an ended ctx returns at once")
}

// TestPingConnectionEnds ends the connection while a Ping waits: it returns
// net.ErrClosed, and so does every later Ping.
func TestPingConnectionEnds(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	addr := startServer(t, srv, nil)
	rc := dialRaw(t, addr, nil)
	c := srv.waitOpen(t)

	errc := make(chan error, 1)
	go func() {
		_, err := c.Ping(testContext(t))
		errc <- err
	}()
	b0, _, err := rc.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x89), b0)
	rc.nc.Close()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Ping still waits after the connection ended")
	}
	srv.waitClose(t)
	_, err = c.Ping(testContext(t))
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = new(Conn).Ping(testContext(t))
	require.ErrorIs(t, err, net.ErrClosed, "a zero Conn")
}

// TestPingFromReadGoroutine checks that a Ping from a callback on the
// goroutine that reads the connection, which could never see its pong, fails
// at once with an error that says so (it waited out its context before), in
// both modes, from OnOpen and OnMessage; with Options.Parallel, OnMessage
// runs on a goroutine of its own and its Ping gets its pong. The connection
// carries on either way.
func TestPingFromReadGoroutine(t *testing.T) {
	t.Parallel()
	for _, netpoll := range []bool{false, true} {
		for _, parallel := range []int{0, 2} {
			t.Run(fmt.Sprintf("netpoll=%v/parallel=%d", netpoll, parallel), func(t *testing.T) {
				t.Parallel()
				srv := newRecorder()
				type result struct {
					where string
					err   error
					took  time.Duration
				}
				results := make(chan result, 2)
				ping := func(c *Conn, where string) {
					start := time.Now()
					_, err := c.Ping(testContext(t))
					results <- result{where, err, time.Since(start)}
				}
				srv.open = func(c *Conn) { ping(c, "OnOpen") }
				srv.message = func(c *Conn, m *Message) {
					m.Close()
					ping(c, "OnMessage")
				}
				addr := startServer(t, srv, &Options{Netpoll: netpoll, Parallel: parallel})
				client, _, _ := dialTest(t, "ws://"+addr+"/", nil)
				r := <-results
				require.Equal(t, "OnOpen", r.where)
				require.ErrorIs(t, r.err, errPingOnReader)
				require.Contains(t, r.err.Error(), "call Ping from another goroutine")
				require.Less(t, r.took, time.Second, "at once")

				require.NoError(t, client.WriteString("ping from OnMessage"))
				r = <-results
				require.Equal(t, "OnMessage", r.where)
				if parallel > 0 {
					require.NoError(t, r.err, "a parallel OnMessage runs off the read goroutine")
				} else {
					require.ErrorIs(t, r.err, errPingOnReader)
					require.Less(t, r.took, time.Second, "at once")
				}
				rtt, err := srv.waitOpen(t).Ping(testContext(t))
				require.NoError(t, err, "from another goroutine")
				require.Positive(t, rtt)
			})
		}
	}
}
