package gust

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shutdownUpgrader serves u in an httptest server, running each Conn's
// ReadLoop in the handler, and returns its address and a channel that
// receives each error Upgrade returned.
func shutdownUpgrader(t *testing.T, u *Upgrader) (addr string, refused <-chan error) {
	t.Helper()
	errs := make(chan error, 10)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err != nil {
			errs <- err
			return
		}
		c.ReadLoop()
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String(), errs
}

// expectUnavailable sends a handshake to addr and checks that it is
// refused with 503.
func expectUnavailable(t *testing.T, addr string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = nc.Write([]byte(handshakeRequest(addr)))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestUpgraderShutdownSendsGoingAway(t *testing.T) {
	t.Parallel()
	h := newEcho()
	u := newUpgrader(h, nil)
	addr, refused := shutdownUpgrader(t, u)

	raws := []*rawClient{dialRaw(t, addr, nil), dialRaw(t, addr, nil)}
	for _, c := range raws {
		c.send(frame(0x81, []byte("hi")))
		c.expectMessage(OpText, []byte("hi"))
	}
	client := newRecorder()
	gc, _, err := Dial(context.Background(), "ws://"+addr, client, nil)
	require.NoError(t, err)
	go gc.ReadLoop()
	client.waitOpen(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- u.Shutdown(ctx) }()
	for _, c := range raws {
		c.expectClose(StatusGoingAway)
	}
	require.Equal(t, StatusGoingAway, CloseStatus(client.waitClose(t)))
	require.NoError(t, <-shut)
	for range 3 {
		require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
	}

	expectUnavailable(t, addr)
	require.ErrorIs(t, <-refused, ErrServerClosed)
	require.NoError(t, u.Shutdown(ctx), "a second Shutdown has nothing to wait for")
}

func TestUpgraderShutdownReturnsByItsDeadlineWithAPeerThatNeverReads(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	u := newUpgrader(h, &Options{WriteTimeout: time.Hour}) // only ctx can end the stalled write
	addr, _ := shutdownUpgrader(t, u)

	dialRaw(t, addr, nil) // never reads
	stalled := h.waitOpen(t)
	healthy := []*rawClient{dialRaw(t, addr, nil), dialRaw(t, addr, nil)}
	h.waitOpen(t)
	h.waitOpen(t)
	big := make([]byte, 1<<20)
	failed := blockWrites(t, stalled, func() error { return stalled.WriteMessage(OpBinary, big) })

	const wait = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- u.Shutdown(ctx) }()
	// The healthy peers get their 1001 while the stalled one blocks its
	// own write, and nothing else.
	for _, c := range healthy {
		c.expectClose(StatusGoingAway)
	}
	select {
	case err := <-shut:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), wait+2*time.Second, "Shutdown returned long after its deadline")
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after its context's deadline")
	}
	require.Error(t, <-failed)
	var codes []StatusCode
	var cut int
	for range 3 {
		err := h.waitClose(t)
		if errors.Is(err, ErrServerClosed) {
			cut++
		} else {
			codes = append(codes, CloseStatus(err))
		}
	}
	require.Equal(t, 1, cut, "the stalled connection is cut with ErrServerClosed")
	require.Equal(t, []StatusCode{StatusGoingAway, StatusGoingAway}, codes)
}

func TestUpgraderCloseCutsAtOnce(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	u := newUpgrader(h, nil)
	addr, refused := shutdownUpgrader(t, u)
	clients := []*rawClient{dialRaw(t, addr, nil), dialRaw(t, addr, nil)}
	h.waitOpen(t)
	h.waitOpen(t)

	require.NoError(t, u.Close())
	// Close has waited for OnClose: both are recorded by now.
	for range clients {
		select {
		case err := <-h.closed:
			require.ErrorIs(t, err, ErrServerClosed)
		default:
			t.Fatal("Close returned before OnClose")
		}
	}
	for _, c := range clients {
		_, _, err := c.readFrame()
		require.Error(t, err, "no close frame, the connection is cut")
	}
	expectUnavailable(t, addr)
	require.ErrorIs(t, <-refused, ErrServerClosed)
	require.NoError(t, u.Shutdown(context.Background()))
}

// TestUpgraderShutdownCoversConnsNotYetRead: a Conn Upgrade returned whose
// ReadLoop has not started gets its 1001 too, and Shutdown waits for it;
// when cut before its ReadLoop starts, its OnClose runs anyway.
func TestUpgraderShutdownCoversConnsNotYetRead(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	u := newUpgrader(h, nil)
	upgraded := make(chan *Conn, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err == nil {
			upgraded <- c // the test runs its ReadLoop
		}
	}))
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()

	t.Run("shutdown", func(t *testing.T) {
		client := dialRaw(t, addr, nil)
		c := <-upgraded
		shut := make(chan error, 1)
		go func() { shut <- u.Shutdown(context.Background()) }()
		_, p, err := client.readFrame()
		require.NoError(t, err)
		require.Equal(t, StatusGoingAway, StatusCode(uint16(p[0])<<8|uint16(p[1])))
		select {
		case <-shut:
			t.Fatal("Shutdown returned before the connection ended")
		case <-time.After(50 * time.Millisecond):
		}
		client.send(frame(0x88, p[:2]))
		go c.ReadLoop()
		require.NoError(t, <-shut)
		require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
	})

	t.Run("close", func(t *testing.T) {
		h := newRecorder()
		u := newUpgrader(h, nil)
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := u.Upgrade(w, r)
			if err == nil {
				upgraded <- c
			}
		}))
		t.Cleanup(ts.Close)
		dialRaw(t, ts.Listener.Addr().String(), nil)
		c := <-upgraded
		require.NoError(t, u.Close())
		require.ErrorIs(t, h.waitClose(t), ErrServerClosed)
		require.Equal(t, int32(0), h.opens.Load(), "OnOpen never ran")
		c.ReadLoop() // returns at once
		require.ErrorIs(t, c.WriteString("late"), net.ErrClosed)
	})
}

func TestZeroUpgraderShutdown(t *testing.T) {
	t.Parallel()
	var u Upgrader
	require.NoError(t, u.Shutdown(context.Background()))
	var v Upgrader
	require.NoError(t, v.Close())
}

// TestServerShutdownCoversItsUpgrade: a Server's Shutdown reaches the
// connections its Upgrader's Upgrade made inside a net/http server.
func TestServerShutdownCoversItsUpgrade(t *testing.T) {
	t.Parallel()
	h := newEcho()
	s := newServer(h, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.Upgrader.Upgrade(w, r)
		if err == nil {
			c.ReadLoop()
		}
	}))
	t.Cleanup(ts.Close)
	client := dialRaw(t, ts.Listener.Addr().String(), nil)
	client.send(frame(0x81, []byte("hi")))
	client.expectMessage(OpText, []byte("hi"))
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	client.expectClose(StatusGoingAway)
	require.NoError(t, <-shut)
	require.Equal(t, StatusGoingAway, CloseStatus(h.waitClose(t)))
}

// From Shutdown's start, a connection refuses writes as it will once its
// close frame is out, though the goroutines that send the close frames have
// not reached it yet: what the first to leave make their handlers send the
// others (a member left: tell the room) is for connections going away too,
// and with thousands it was most of a Shutdown's work. The peer gets the
// 1001 and nothing before it. Not parallel: it sets a global hook.
func TestShutdownRefusesWritesFromItsStart(t *testing.T) {
	h := newRecorder()
	var u *Upgrader
	addr := serverModes[0].serve(t, h, nil, func(up *Upgrader) { u = up })
	c := dialRaw(t, addr, nil)
	sc := h.waitOpen(t)
	var errs []error
	hookShutdown(t, u, func() {
		errs = append(errs,
			sc.WriteMessage(OpText, []byte("late")),
			sc.WriteAsync(OpText, []byte("late"), nil),
			sc.WritePing(nil))
	})
	shut := make(chan error, 1)
	go func() { shut <- u.Shutdown(context.Background()) }()
	b0, p, err := c.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0x88), b0, "the first frame is the close, no %q before it", p)
	require.Equal(t, StatusGoingAway, StatusCode(binary.BigEndian.Uint16(p)))
	c.send(frame(0x88, p[:2]))
	require.NoError(t, <-shut)
	require.Len(t, errs, 3)
	for _, err := range errs {
		require.ErrorIs(t, err, net.ErrClosed)
	}
}
