package gust

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The heartbeat tests use short intervals, and assert bounds rather than
// times: the machine may be busy.
const (
	hbInterval = 60 * time.Millisecond
	hbTimeout  = 60 * time.Millisecond
	hbMargin   = 600 * time.Millisecond // scheduling on a loaded machine
)

func heartbeatOptions() *Options {
	return &Options{PingInterval: hbInterval, PingTimeout: hbTimeout}
}

// TestHeartbeatCutsSilentPeer: a raw peer that reads gust's pings and
// never answers is cut, without a close frame, within PingInterval +
// PingTimeout (plus a margin), having received at least one empty ping;
// OnClose says why, with an error that wraps os.ErrDeadlineExceeded.
func TestHeartbeatCutsSilentPeer(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		srv := newRecorder()
		addr := m.start(t, srv, heartbeatOptions())
		start := time.Now()
		rc := dialRaw(t, addr, nil)
		srv.waitOpen(t)

		var pings atomic.Int32
		frames := make(chan error, 1)
		go func() {
			for {
				b0, payload, err := rc.readFrame()
				if err != nil {
					frames <- err
					return
				}
				switch Opcode(b0 & 0x0f) {
				case opPing:
					if len(payload) == 0 {
						pings.Add(1)
					}
				default:
					frames <- errors.New("unexpected frame, opcode " + Opcode(b0&0x0f).String())
					return
				}
			}
		}()

		err := srv.waitClose(t)
		elapsed := time.Since(start)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.ErrorContains(t, err, "no frame from the peer for")
		require.Less(t, elapsed, hbInterval+hbTimeout+hbMargin)
		// Not before the silence lasted PingInterval, when the ping went
		// out (a looser bound than the ideal PingInterval + PingTimeout,
		// which a late tick may shorten by a tick or two).
		require.GreaterOrEqual(t, elapsed, hbInterval, "cut too early")

		// The connection ends without a close frame: the reader sees the
		// end of the stream, after the ping.
		require.Error(t, <-frames)
		require.Positive(t, pings.Load(), "the peer was pinged before it was cut")
	})
}

// TestHeartbeatAnsweringPeerStays: gust's own client and server answer
// pings (BuiltinEventHandler); with heartbeats on one side, the other
// answering, the connection outlives several intervals and the pinging side
// sees the pongs.
func TestHeartbeatAnsweringPeerStays(t *testing.T) {
	t.Parallel()
	for _, side := range []string{"server", "client"} {
		t.Run(side+" pings", func(t *testing.T) {
			t.Parallel()
			srv := newRecorder()
			var srvOpts, clientOpts Options
			pinger := srv
			if side == "server" {
				srvOpts = *heartbeatOptions()
			} else {
				clientOpts = *heartbeatOptions()
			}
			var pongs atomic.Int32
			countPongs := func(_ *Conn, p []byte) {
				if len(p) == 0 {
					pongs.Add(1)
				}
			}
			addr := startServer(t, srv, &srvOpts)
			client := newRecorder()
			if side == "client" {
				pinger = client
			}
			pinger.pong = countPongs
			c, _, err := Dial(testContext(t), "ws://"+addr+"/", client, &DialOptions{Options: clientOpts})
			require.NoError(t, err)
			runClient(t, c)
			srv.waitOpen(t)

			select {
			case err := <-srv.closed:
				t.Fatalf("the server's connection ended: %v", err)
			case err := <-client.closed:
				t.Fatalf("the client's connection ended: %v", err)
			case <-time.After(6 * (hbInterval + hbTimeout)):
			}
			require.GreaterOrEqual(t, pongs.Load(), int32(2), "pinged, and answered, several times")

			require.NoError(t, c.Close(StatusNormalClosure, ""))
			require.Equal(t, StatusNormalClosure, CloseStatus(srv.waitClose(t)))
			require.Equal(t, StatusNormalClosure, CloseStatus(client.waitClose(t)))
		})
	}
}

// TestHeartbeatPingsEveryIntervalWithALongTimeout: a peer that answers
// is pinged after each PingInterval of silence, however long PingTimeout
// is (a proxy that cuts idle connections after PingInterval + a little
// must see a ping that often).
func TestHeartbeatPingsEveryIntervalWithALongTimeout(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	var pongs atomic.Int32
	srv.pong = func(_ *Conn, p []byte) { pongs.Add(1) }
	addr := startServer(t, srv, &Options{PingInterval: hbInterval, PingTimeout: time.Minute})
	client := newRecorder()
	c, _, err := Dial(testContext(t), "ws://"+addr+"/", client, nil)
	require.NoError(t, err)
	runClient(t, c)
	srv.waitOpen(t)
	deadline := time.Now().Add(30 * time.Second) // a minute is the old cadence
	for pongs.Load() < 3 {
		require.True(t, time.Now().Before(deadline), "pinged %d times, not every PingInterval", pongs.Load())
		time.Sleep(hbInterval)
	}
	require.NoError(t, c.Close(StatusNormalClosure, ""))
	require.Equal(t, StatusNormalClosure, CloseStatus(srv.waitClose(t)))
}

// TestHeartbeatDataCountsAsAlive: a raw peer that sends data more often
// than the interval but never answers a ping stays connected.
func TestHeartbeatDataCountsAsAlive(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	var messages atomic.Int32
	srv.message = func(_ *Conn, m *Message) {
		messages.Add(1)
		m.Close()
	}
	addr := startServer(t, srv, heartbeatOptions())
	rc := dialRaw(t, addr, nil)
	srv.waitOpen(t)

	end := time.Now().Add(6 * (hbInterval + hbTimeout))
	for time.Now().Before(end) {
		rc.send(frame(0x81, []byte("still here")))
		select {
		case err := <-srv.closed:
			t.Fatalf("a peer that sends data was cut: %v", err)
		case <-time.After(hbInterval / 3):
		}
	}
	require.Positive(t, messages.Load())
	rc.send(frame(0x88, closePayload(StatusNormalClosure, "")))
	require.Equal(t, StatusNormalClosure, CloseStatus(srv.waitClose(t)))
}

// waitWheels waits, up to 5 s, until n wheel goroutines run.
func waitWheels(t *testing.T, n int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runningWheels() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d wheel goroutines run, want %d", runningWheels(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeartbeatOffStartsNothing: without PingInterval, a connection starts
// no wheel. Not parallel: it counts the process's wheels.
func TestHeartbeatOffStartsNothing(t *testing.T) {
	waitWheels(t, 0) // what an earlier test started has stopped
	srv := newEcho()
	addr := startServer(t, srv, nil)
	c, _, _ := dialTest(t, "ws://"+addr+"/", nil)
	sc := srv.waitOpen(t)
	require.Nil(t, c.cfg.wheel)
	require.Nil(t, sc.cfg.wheel)
	require.NoError(t, c.WriteString("hello"))
	time.Sleep(2 * hbInterval)
	require.Zero(t, runningWheels())
}

// TestHeartbeatWheelStops: the wheel's goroutine runs while connections
// with heartbeats are open, one for the connections of both sides (same
// settings, same wheel), and exits once the last has ended. Not parallel:
// it counts the process's wheels.
func TestHeartbeatWheelStops(t *testing.T) {
	waitWheels(t, 0)
	srv := newRecorder()
	addr := startServer(t, srv, heartbeatOptions())
	client := newRecorder()
	c, _, err := Dial(testContext(t), "ws://"+addr+"/", client, &DialOptions{Options: *heartbeatOptions()})
	require.NoError(t, err)
	runClient(t, c)
	sc := srv.waitOpen(t)
	require.Same(t, c.cfg.wheel, sc.cfg.wheel)
	waitWheels(t, 1) // the wheel's goroutine counts itself once it runs

	require.NoError(t, c.Close(StatusNormalClosure, ""))
	srv.waitClose(t)
	client.waitClose(t)
	waitWheels(t, 0)

	// A new connection starts the wheel again.
	c2, _, err := Dial(testContext(t), "ws://"+addr+"/", newRecorder(), &DialOptions{Options: *heartbeatOptions()})
	require.NoError(t, err)
	runClient(t, c2)
	srv.waitOpen(t)
	waitWheels(t, 1) // the wheel's goroutine counts itself once it runs
	require.NoError(t, c2.CloseNow())
	srv.waitClose(t)
	waitWheels(t, 0)
}

// TestHeartbeatBusyReaderIsNotSilent: a callback that runs longer than
// PingInterval + PingTimeout, while the peer sends nothing, does not get
// the connection cut: silence counts only while the read goroutine waits.
func TestHeartbeatBusyReaderIsNotSilent(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	srv.message = func(_ *Conn, m *Message) {
		time.Sleep(4 * (hbInterval + hbTimeout))
		m.Close()
	}
	addr := startServer(t, srv, heartbeatOptions())
	rc := dialRaw(t, addr, nil)
	srv.waitOpen(t)
	rc.send(frame(0x81, []byte("slow")))
	select {
	case err := <-srv.closed:
		t.Fatalf("cut while the handler ran: %v", err)
	case <-time.After(4 * (hbInterval + hbTimeout)):
	}
	rc.send(frame(0x88, closePayload(StatusNormalClosure, "")))
	require.Equal(t, StatusNormalClosure, CloseStatus(srv.waitClose(t)))
}

// TestHeartbeatLatePongKeepsTheCadence walks Check through a pong that
// comes after the next check (a busy process): the check that finds it
// missing comes back within PingInterval, not at PingTimeout, so the ping
// after the pong is PingInterval after it.
func TestHeartbeatLatePongKeepsTheCadence(t *testing.T) {
	t.Parallel()
	cfg := newConfig(Options{PingInterval: time.Second, PingTimeout: time.Hour}, true)
	hb := &heartbeat{c: &Conn{cfg: cfg}}
	interval := cfg.pingTicks
	hb.seen.Store(10) // waiting since tick 10

	due, fire := hb.Check(10 + interval + 1)
	require.True(t, fire, "silent for PingInterval: pinged")
	pinged := 10 + interval + 1

	due, fire = hb.Check(due) // the pong has not come yet
	require.False(t, fire)
	require.LessOrEqual(t, due, pinged+2*interval, "a late pong is looked for within PingInterval")

	hb.seen.Store(due - 1) // the pong came, then silence again
	for range 3 {
		due, fire = hb.Check(due)
		if fire {
			break
		}
	}
	require.True(t, fire, "pinged again PingInterval after the late pong")
	require.LessOrEqual(t, due, pinged+4*interval+2)
}

// TestHeartbeatSize: a connection's heartbeat state, its place in the
// wheel included, stays in 48 bytes.
func TestHeartbeatSize(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, unsafe.Sizeof(heartbeat{}), uintptr(48))
}

func TestHeartbeatDefaults(t *testing.T) {
	t.Parallel()
	cfg := newConfig(Options{PingInterval: time.Second}, true)
	require.Equal(t, time.Second, cfg.PingTimeout)
	require.Equal(t, 250*time.Millisecond, cfg.wheel.Tick())
	require.Equal(t, uint64(4), cfg.pingTicks)
	require.Equal(t, uint64(4), cfg.pingTimeoutTicks)

	cfg = newConfig(Options{PingInterval: time.Minute, PingTimeout: 10 * time.Second}, true)
	require.Equal(t, 2500*time.Millisecond, cfg.wheel.Tick())
	require.Equal(t, uint64(24), cfg.pingTicks)
	require.Equal(t, uint64(4), cfg.pingTimeoutTicks)

	cfg = newConfig(Options{PingTimeout: time.Second}, true)
	require.Nil(t, cfg.wheel, "PingTimeout alone turns nothing on")
	require.Zero(t, cfg.PingTimeout)
}

// TestHeartbeatPingNeverWaits: the wheel's goroutine writes a ping itself
// only when that cannot wait. On an idle connection the frame goes out at
// once; with the write lock held, or with the socket full because the peer
// stopped reading, tryPingNow declines at once and the ping goes through
// the outbox instead.
func TestHeartbeatPingNeverWaits(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	addr := startServer(t, srv, nil)
	rc := dialRaw(t, addr, nil)
	c := srv.waitOpen(t)

	require.True(t, (&heartbeat{c: c}).tryPingNow(), "an idle connection is pinged at once")
	b0, payload, err := rc.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x80|opPing), b0)
	require.Empty(t, payload)

	c.wr.mu.Lock()
	require.False(t, (&heartbeat{c: c}).tryPingNow(), "the write lock is busy")
	c.wr.mu.Unlock()

	// Fill the socket: write past the peer, which does not read, until
	// writes make no progress, in smaller and smaller pieces down to one
	// byte, so that not even the 2 bytes of a ping fit. The kernel may
	// still make room after the last write timed out (a late ACK, the send
	// buffer growing), and then the ping rightly goes out; so fill again
	// and try again, a bounded number of times, until the socket is seen
	// full when the ping is tried.
	fill := func() {
		for _, size := range []int{64 << 10, 1 << 10, 1} {
			chunk := make([]byte, size)
			for {
				require.NoError(t, c.conn.SetWriteDeadline(time.Now().Add(30*time.Millisecond)))
				if _, err := c.conn.Write(chunk); err != nil {
					require.ErrorIs(t, err, os.ErrDeadlineExceeded)
					break
				}
			}
		}
		require.NoError(t, c.conn.SetWriteDeadline(time.Time{}))
	}
	declined := false
	for attempt := 0; attempt < 20 && !declined; attempt++ {
		fill()
		start := time.Now()
		declined = !(&heartbeat{c: c}).tryPingNow()
		require.Less(t, time.Since(start), time.Second, "tryPingNow waited for the peer")
		if declined && c.wr.buf != nil {
			// Room for one byte of the two appeared: the other is corked
			// for the writer, and the connection stays a valid stream.
			require.Len(t, *c.wr.buf, 1, "the ping's unwritten byte is corked")
			t.Log("the kernel took one byte of the ping; the corked path was checked instead")
			c.CloseNow()
			srv.waitClose(t)
			return
		}
	}
	require.True(t, declined, "tryPingNow never declined on a full socket")
	require.Nil(t, c.wr.buf, "nothing was written, nothing is corked")
	c.CloseNow()
	srv.waitClose(t)
}
