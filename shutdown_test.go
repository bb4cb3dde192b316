package gust

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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

// never is a drain's window so long that no close is due during a test:
// one within its first second has a chance of 2⁻³².
const never = time.Duration(1 << 62)

// drainer is what drains: a *Server or an *Upgrader.
type drainer interface {
	Drain(ctx context.Context, window time.Duration, code StatusCode) error
	Draining() bool
	Shutdown(ctx context.Context) error
	Close() error
}

// drained is a server a test drains: where to dial its WebSockets (addr,
// for dialRaw) and ask its health route (health), the drainer, and its
// Upgrader (the Server's field), for hookDrain.
type drained struct {
	addr, health string
	d            drainer
	u            *Upgrader
	client       *http.Client
}

// drainServe serves connections to h with the options opts and the
// handshake settings set puts on the Upgrader (set may be nil).
type drainServe func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) drained

// drainModes serve WebSockets beside a health route that answers 503 while
// Draining: an Upgrader in net/http and a Server with HTTPHandler, each in
// goroutine and netpoll mode, and a Server over TLS on the event loops.
var drainModes = []struct {
	name  string
	serve drainServe
}{
	{"upgrader", serveDrainUpgrader},
	{"server", serveDrainServer(false)},
	{"upgrader-netpoll", withNetpoll(serveDrainUpgrader)},
	{"server-netpoll", withNetpoll(serveDrainServer(false))},
	{"server-tls-netpoll", withNetpoll(serveDrainServer(true))},
}

// forEachDrainMode runs f, in parallel, over drainModes.
func forEachDrainMode(t *testing.T, f func(t *testing.T, serve drainServe)) {
	for _, m := range drainModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			f(t, m.serve)
		})
	}
}

func withNetpoll(serve drainServe) drainServe {
	return func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) drained {
		o := Options{}
		if opts != nil {
			o = *opts
		}
		o.Netpoll = true
		return serve(t, h, &o, set)
	}
}

// healthRoute answers 503 "draining" while d drains, else 200 "ok".
func healthRoute(d drainer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if d.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	return mux
}

func serveDrainUpgrader(t *testing.T, h Event, opts *Options, set func(*Upgrader)) drained {
	u := newUpgrader(h, opts)
	if set != nil {
		set(u)
	}
	health := healthRoute(u)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			health.ServeHTTP(w, r)
			return
		}
		if c, err := u.Upgrade(w, r); err == nil {
			c.ReadLoop()
		}
	}))
	t.Cleanup(func() {
		u.Close()
		ts.Close()
	})
	addr := ts.Listener.Addr().String()
	return drained{addr: addr, health: "http://" + addr + "/healthz", d: u, u: u, client: newTestClient(t)}
}

func serveDrainServer(withTLS bool) drainServe {
	return func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) drained {
		s := newServer(h, opts)
		if set != nil {
			set(&s.Upgrader)
		}
		s.HTTPHandler = healthRoute(s)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		dr := drained{addr: addr, health: "http://" + addr + "/healthz", d: s, u: &s.Upgrader, client: newTestClient(t)}
		serve := func() error { return s.Serve(ln) }
		if withTLS {
			s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{tlsServerCert()}}
			serve = func() error { return s.ServeTLS(ln, "", "") }
			dr.addr, dr.health = "tls://"+addr, "https://"+addr+"/healthz"
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
			t.Cleanup(tr.CloseIdleConnections)
			dr.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
		}
		done := make(chan error, 1)
		go func() { done <- serve() }()
		t.Cleanup(func() {
			require.NoError(t, s.Close())
			require.ErrorIs(t, <-done, ErrServerClosed)
		})
		return dr
	}
}

// healthStatus asks the health route and returns its status and body.
func (dr drained) healthStatus(t *testing.T) (int, string) {
	t.Helper()
	resp, err := dr.client.Get(dr.health)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// expectDrainRefusal sends a handshake to addr and checks that it is
// refused as a drain refuses: 503, Retry-After: 1, Connection: close.
func expectDrainRefusal(t *testing.T, addr string) {
	t.Helper()
	nc := dialNet(t, addr)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: nc, br: newBufReader(nc)}
	resp := c.rawRequest(handshakeRequest(addr))
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.True(t, resp.Close, "Connection: close")
}

// closeSeen is the close frame a client got: its code and when it came.
type closeSeen struct {
	local string // the client's address, the server Conn's RemoteAddr
	code  StatusCode
	at    time.Time
	err   error
}

// awaitClose reads c's frames, in a goroutine, until a close frame, which
// it answers, and sends what it saw on seen.
func awaitClose(c *rawClient, seen chan<- closeSeen) {
	local := c.nc.LocalAddr().String()
	c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		for {
			b0, p, err := c.readFrame()
			if err != nil {
				seen <- closeSeen{local: local, err: err}
				return
			}
			if Opcode(b0&0x0f) != opClose {
				continue
			}
			at := time.Now()
			code := StatusNoStatusReceived
			if len(p) >= 2 {
				code = StatusCode(binary.BigEndian.Uint16(p))
			}
			c.nc.Write(frame(0x88, p[:min(len(p), 2)]))
			seen <- closeSeen{local: local, code: code, at: at}
			return
		}
	}()
}

// dialDrained opens n connections to dr, and waits for their OnOpen.
func dialDrained(t *testing.T, dr drained, h *recorder, n int) []*rawClient {
	t.Helper()
	clients := make([]*rawClient, n)
	for i := range clients {
		clients[i] = dialRaw(t, dr.addr, nil)
		h.waitOpen(t)
	}
	return clients
}

// TestDrainSpreadsItsClosesOverTheWindow: each connection gets 1012 at the
// time the drain planned for it, never before, the times drawn over the
// window; handshakes are refused and the health route says so meanwhile;
// Drain returns once all have ended.
func TestDrainSpreadsItsClosesOverTheWindow(t *testing.T) {
	forEachDrainMode(t, func(t *testing.T, serve drainServe) {
		h := newRecorder()
		dr := serve(t, h, nil, nil)
		status, body := dr.healthStatus(t)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "ok", body)
		require.False(t, dr.d.Draining())

		const n, window = 16, 300 * time.Millisecond
		clients := dialDrained(t, dr, h, n)
		var mu sync.Mutex
		plan := map[string]time.Duration{} // by the client's address
		planned := make(chan struct{})
		hookDrain(t, dr.u, func(c *Conn, at time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			plan[c.RemoteAddr().String()] = at
			if len(plan) == n {
				close(planned)
			}
		})
		seen := make(chan closeSeen, n)
		for _, c := range clients {
			awaitClose(c, seen)
		}

		start := time.Now() // before the drain's own start
		drainDone := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			drainDone <- dr.d.Drain(ctx, window, 0)
		}()
		<-planned
		require.True(t, dr.d.Draining())
		expectDrainRefusal(t, dr.addr)

		var closes []closeSeen
		for range n {
			s := <-seen
			require.NoError(t, s.err)
			closes = append(closes, s)
		}
		require.NoError(t, <-drainDone)

		mu.Lock()
		defer mu.Unlock()
		var times []time.Duration
		for _, s := range closes {
			require.Equal(t, StatusServiceRestart, s.code)
			at, ok := plan[s.local]
			require.True(t, ok, "a close for a connection the drain did not plan")
			require.GreaterOrEqual(t, s.at.Sub(start), at, "a close came before its time")
			times = append(times, at)
		}
		// The times are the drain's, drawn uniformly over the window
		// (TestPlanClosesIsUniform): 16 of them all within a third of it
		// has a chance of 3·3⁻¹⁶, below 10⁻⁷.
		require.GreaterOrEqual(t, slices.Max(times)-slices.Min(times), window/3, "the closes are not spread: %v", times)
		require.Less(t, slices.Max(times), window)
		for range n {
			require.Equal(t, StatusServiceRestart, CloseStatus(h.waitClose(t)))
		}
		require.True(t, dr.d.Draining(), "still, once drained")
	})
}

// TestDrainKeepsTheHealthRouteAnswering: during the window, plain requests
// are served and the health route reports the drain, while handshakes are
// refused; a ctx that ends cuts the connections not closed yet.
func TestDrainKeepsTheHealthRouteAnswering(t *testing.T) {
	forEachDrainMode(t, func(t *testing.T, serve drainServe) {
		h := newEcho()
		dr := serve(t, h, nil, nil)
		const n = 3
		clients := dialDrained(t, dr, h, n)
		planned := make(chan struct{}, n)
		hookDrain(t, dr.u, func(*Conn, time.Duration) { planned <- struct{}{} })

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		drainDone := make(chan error, 1)
		go func() { drainDone <- dr.d.Drain(ctx, never, 0) }()
		for range n {
			<-planned
		}
		for range 2 {
			status, body := dr.healthStatus(t)
			require.Equal(t, http.StatusServiceUnavailable, status)
			require.Equal(t, "draining", body)
			expectDrainRefusal(t, dr.addr)
		}
		// The connections open keep working until their time.
		clients[0].send(frame(0x81, []byte("still here")))
		clients[0].expectMessage(OpText, []byte("still here"))

		cancel()
		require.ErrorIs(t, <-drainDone, context.Canceled)
		for range n {
			require.ErrorIs(t, h.waitClose(t), ErrServerClosed, "cut when ctx ended")
		}
		for _, c := range clients {
			_, _, err := c.readFrame()
			require.Error(t, err, "no close frame: cut")
		}
	})
}

// TestDrainWithACodeAndNoWindow: the code chosen goes to every connection,
// all at once when the window is 0; a code no close frame may carry is
// refused, and nothing drains.
func TestDrainWithACodeAndNoWindow(t *testing.T) {
	forEachDrainMode(t, func(t *testing.T, serve drainServe) {
		h := newRecorder()
		dr := serve(t, h, nil, nil)
		clients := dialDrained(t, dr, h, 4)

		for _, bad := range []StatusCode{StatusNoStatusReceived, StatusAbnormalClosure, 1004, 2999, 5000} {
			require.ErrorIs(t, dr.d.Drain(context.Background(), 0, bad), ErrInvalidCloseCode)
		}
		require.False(t, dr.d.Draining())

		const code StatusCode = 4001
		seen := make(chan closeSeen, len(clients))
		for _, c := range clients {
			awaitClose(c, seen)
		}
		require.NoError(t, dr.d.Drain(testContext(t), 0, code))
		for range clients {
			s := <-seen
			require.NoError(t, s.err)
			require.Equal(t, code, s.code)
			require.Equal(t, code, CloseStatus(h.waitClose(t)))
		}
	})
}

// TestShutdownOrCloseDuringADrain: either takes over at once, Shutdown
// with 1001 to the connections the drain has not closed yet; the drain
// then returns without waiting for its window. A second Drain keeps the
// first one's times and code, and returns with it.
func TestShutdownOrCloseDuringADrain(t *testing.T) {
	for _, how := range []string{"shutdown", "close", "drain"} {
		t.Run(how, func(t *testing.T) {
			forEachDrainMode(t, func(t *testing.T, serve drainServe) {
				h := newRecorder()
				dr := serve(t, h, nil, nil)
				const n = 3
				clients := dialDrained(t, dr, h, n)
				planned := make(chan struct{}, n)
				hookDrain(t, dr.u, func(*Conn, time.Duration) { planned <- struct{}{} })
				seen := make(chan closeSeen, n)
				for _, c := range clients {
					awaitClose(c, seen)
				}
				window := never
				if how == "drain" {
					window = 200 * time.Millisecond
				}
				ctx := testContext(t)
				drainDone := make(chan error, 1)
				go func() { drainDone <- dr.d.Drain(ctx, window, 4002) }()
				for range n {
					<-planned
				}
				want, wantErr := StatusGoingAway, error(nil)
				switch how {
				case "shutdown":
					require.NoError(t, dr.d.Shutdown(ctx))
				case "close":
					require.NoError(t, dr.d.Close())
					wantErr = ErrServerClosed
				case "drain":
					require.NoError(t, dr.d.Drain(ctx, time.Hour, 4003))
					want = 4002
				}
				require.NoError(t, <-drainDone)
				for range n {
					s := <-seen
					err := h.waitClose(t)
					if wantErr != nil {
						require.Error(t, s.err, "cut: no close frame")
						require.ErrorIs(t, err, wantErr)
						continue
					}
					require.NoError(t, s.err)
					require.Equal(t, want, s.code)
					require.Equal(t, want, CloseStatus(err))
				}
			})
		})
	}
}

// TestDrainIsNotHeldUpByAPeerThatNeverReads: a connection whose write is
// blocked on a full socket gets its close frame from a goroutine of its
// own; the others get theirs in time, and ctx bounds the wait for it.
func TestDrainIsNotHeldUpByAPeerThatNeverReads(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a socket")
	}
	forEachDrainMode(t, func(t *testing.T, serve drainServe) {
		h := newRecorder()
		dr := serve(t, h, &Options{WriteTimeout: time.Hour}, nil) // only ctx ends the stalled write
		dialRaw(t, dr.addr, nil)                                  // never reads
		stalled := h.waitOpen(t)
		const n = 4
		clients := dialDrained(t, dr, h, n)
		failed := blockWrites(t, stalled, func() error { return stalled.WriteMessage(OpBinary, make([]byte, 1<<20)) })
		seen := make(chan closeSeen, n)
		for _, c := range clients {
			awaitClose(c, seen)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		drainDone := make(chan error, 1)
		go func() { drainDone <- dr.d.Drain(ctx, 100*time.Millisecond, 0) }()
		for range n {
			s := <-seen
			require.NoError(t, s.err)
			require.Equal(t, StatusServiceRestart, s.code)
		}
		require.ErrorIs(t, <-drainDone, context.DeadlineExceeded)
		require.Error(t, <-failed)
		var cut int
		for range n + 1 {
			if errors.Is(h.waitClose(t), ErrServerClosed) {
				cut++
			}
		}
		require.Equal(t, 1, cut, "the stalled connection is cut when ctx ends")
	})
}

// TestDrainReachesAHandshakeInProgress: a handshake that passed the
// drain's check before it started gets the drain's close frame as soon as
// its connection opens.
func TestDrainReachesAHandshakeInProgress(t *testing.T) {
	forEachDrainMode(t, func(t *testing.T, serve drainServe) {
		h := newRecorder()
		inRequest, release := make(chan struct{}), make(chan struct{})
		var held sync.Once
		dr := serve(t, h, nil, func(u *Upgrader) {
			u.OnRequest = func(r *http.Request, _ http.Header, _ *Conn) error {
				if r.URL.Query().Has("hold") {
					held.Do(func() { close(inRequest) })
					<-release
				}
				return nil
			}
		})
		planned := make(chan struct{}, 1)
		hookDrain(t, dr.u, func(*Conn, time.Duration) { planned <- struct{}{} })
		dialRaw(t, dr.addr, nil) // one the drain plans for: the drain stays in its window
		h.waitOpen(t)

		late := make(chan *rawClient, 1)
		go func() {
			nc, err := dialAddr(dr.addr)
			if err != nil {
				close(late)
				return
			}
			t.Cleanup(func() { nc.Close() })
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			req := strings.Replace(handshakeRequest(dr.addr), "GET / ", "GET /?hold ", 1)
			c := &rawClient{t: t, nc: nc, br: newBufReader(nc)}
			if _, err := io.WriteString(nc, req); err != nil {
				close(late)
				return
			}
			late <- c
		}()
		<-inRequest
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		drainDone := make(chan error, 1)
		go func() { drainDone <- dr.d.Drain(ctx, never, 4004) }()
		<-planned
		close(release)

		c, ok := <-late
		require.True(t, ok, "dialing failed")
		resp, err := http.ReadResponse(c.br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		c.expectClose(4004)
		require.Equal(t, StatusCode(4004), CloseStatus(h.waitClose(t)))
		cancel()
		require.ErrorIs(t, <-drainDone, context.Canceled)
		require.ErrorIs(t, h.waitClose(t), ErrServerClosed, "the planned one, cut")
	})
}

// TestZeroDrain: Drain on a zero Upgrader or Server has nothing to wait
// for, and leaves it refusing.
func TestZeroDrain(t *testing.T) {
	t.Parallel()
	var u Upgrader
	require.False(t, u.Draining())
	require.NoError(t, u.Drain(context.Background(), time.Second, 0))
	require.True(t, u.Draining())
	var s Server
	require.NoError(t, s.Drain(context.Background(), time.Second, 0))
	require.True(t, s.Draining())
	require.ErrorIs(t, s.Serve(newClosedListener(t)), ErrServerClosed)
}

// newClosedListener is a listener for a Serve that must return at once.
func newClosedListener(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestMetricsDrain: Metrics.Closed reports a drain's close, answered, as
// the shutdown's, with the drain's code.
func TestMetricsDrain(t *testing.T) {
	t.Parallel()
	ml := &metricsLog{}
	h := newRecorder()
	s := newServer(h, &Options{Metrics: ml})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runServer(t, s, ln)
	c := dialRaw(t, ln.Addr().String(), nil)
	h.waitOpen(t)
	seen := make(chan closeSeen, 1)
	awaitClose(c, seen)
	require.NoError(t, s.Drain(testContext(t), 0, 0))
	require.Equal(t, StatusServiceRestart, (<-seen).code)
	require.Equal(t, closeEvent{StatusServiceRestart, "shutdown"}, ml.waitClose(t))
}
