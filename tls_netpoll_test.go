//go:build linux

package gust

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gustws/gust/internal/netpoll"
	"github.com/stretchr/testify/require"
)

// TLS in netpoll mode: a Server's ServeTLS makes its *tls.Conn over a
// netpoll.Under, which moves to gust's socket once the handshake is done,
// so that the event loops serve TLS connections as they serve plain ones.

func TestTLSNetpollEcho(t *testing.T) {
	h := newEcho()
	var opened *Conn
	h.open = func(c *Conn) { opened = c }
	addr := tlsNetpollMode.start(t, h, nil)
	c := dialRaw(t, addr, nil)
	h.waitOpen(t)
	require.True(t, opened.Netpoll(), "served by an event loop")
	_, ok := opened.NetConn().(*tls.Conn)
	require.True(t, ok, "NetConn is the *tls.Conn")
	for _, n := range []int{0, 10, 125, 126, 1000, 70 << 10, 3 << 20} {
		p := bytes.Repeat([]byte{byte(n)}, n)
		c.send(frame(0x82, p))
		c.expectMessage(OpBinary, p)
	}
	c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
	c.expectClose(StatusNormalClosure)
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
}

// The frame-level tests and netpoll mode's own run over TLS too.
func init() {
	frameModes = append(frameModes, tlsNetpollMode)
	netpollModes = append(netpollModes, tlsNetpollMode)
	tlsStreamModes = append(tlsStreamModes, tlsNetpollMode)
}

// A TLS connection parked on its loop holds no goroutine and no read state,
// and the next message resumes it; the client's side of wss in netpoll
// mode is served by a loop too.
func TestTLSNetpollIdleParksAndResumes(t *testing.T) {
	var holds atomic.Int32
	hookPark(t, func(c *Conn, holdsRead bool) {
		if holdsRead {
			holds.Add(1)
		}
	})
	h := newEcho()
	addr := tlsNetpollMode.start(t, h, nil)
	url, opts := modeURL(t, tlsNetpollMode, addr, "/")
	opts.Options.Netpoll = true
	ch := newRecorder()
	client, _, err := Dial(testContext(t), url, ch, opts)
	require.NoError(t, err)
	runClient(t, client)
	sc := h.waitOpen(t)
	require.True(t, sc.Netpoll())
	require.True(t, client.Netpoll(), "the client's wss connection is on a loop too")
	for round := range 3 {
		require.Eventually(t, func() bool { return parkedIdle(sc) && client.sock().Parked() }, 5*time.Second, time.Millisecond,
			"both ends parked, round %d", round)
		msg := bytes.Repeat([]byte{byte(round)}, 100<<round)
		require.NoError(t, client.WriteMessage(OpBinary, msg))
		require.Equal(t, msg, ch.waitMessage(t).data)
	}
	require.Zero(t, holds.Load(), "an idle TLS connection parks without its read state")
	require.NoError(t, client.Close(StatusNormalClosure, ""))
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
}

// A TLS record that arrives a few bytes at a time is kept by crypto/tls
// while the connection parks between the pieces, with no goroutine; the
// message comes out once the record is whole. Records that arrive
// together are all dispatched before the connection parks.
func TestTLSNetpollRecordInPieces(t *testing.T) {
	h := newEcho()
	addr := strings.TrimPrefix(tlsNetpollMode.start(t, h, nil), "tls://")
	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer raw.Close()
	tp := &tapConn{Conn: raw}
	tc := tls.Client(tp, &tls.Config{InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: tc, br: bufio.NewReader(tc)}
	c.rawRequest(handshakeRequest(addr))
	sc := h.waitOpen(t)

	rec := tp.sealed(t, tc, frame(0x82, []byte("in pieces")))
	for i := 0; i < len(rec); i += 5 {
		require.Eventually(t, func() bool { return parkedIdle(sc) }, 5*time.Second, time.Millisecond,
			"parked before piece %d", i/5)
		_, err := raw.Write(rec[i:min(i+5, len(rec))])
		require.NoError(t, err)
	}
	c.expectMessage(OpBinary, []byte("in pieces"))

	var three []byte
	for _, m := range []string{"one", "two", "three"} {
		three = append(three, tp.sealed(t, tc, frame(0x81, []byte(m)))...)
	}
	_, err = raw.Write(three)
	require.NoError(t, err)
	for _, m := range []string{"one", "two", "three"} {
		c.expectMessage(OpText, []byte(m))
	}
}

// tapConn is a client's connection: what the client writes goes to the
// network, or to divert while it is set.
type tapConn struct {
	net.Conn
	divert *bytes.Buffer
}

func (tp *tapConn) Write(p []byte) (int, error) {
	if tp.divert != nil {
		return tp.divert.Write(p)
	}
	return tp.Conn.Write(p)
}

// sealed returns the records tc's Write of p makes, kept off the network.
func (tp *tapConn) sealed(t *testing.T, tc *tls.Conn, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	tp.divert = &b
	defer func() { tp.divert = nil }()
	_, err := tc.Write(p)
	require.NoError(t, err)
	return b.Bytes()
}

// Slowloris on the TLS handshake: a client that sends nothing, and one that
// trickles its ClientHello a byte every 50 ms, are both cut once
// HandshakeTimeout has passed, leaving no goroutine or descriptor behind.
func TestTLSNetpollSlowlorisOnTheHandshake(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := newEcho()
	addr := strings.TrimPrefix(tlsNetpollMode.serve(t, h, nil, func(u *Upgrader) { u.HandshakeTimeout = timeout }), "tls://")

	// A ClientHello, as a client would send it, for the trickler.
	a, b := net.Pipe()
	go tls.Client(a, &tls.Config{InsecureSkipVerify: true}).Handshake()
	hello := make([]byte, 16<<10)
	n, err := b.Read(hello)
	require.NoError(t, err)
	hello = hello[:n]
	a.Close()
	require.Greater(t, len(hello), 100)

	baseFDs := countFDs(t)
	for _, trickle := range []bool{false, true} {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		start := time.Now()
		if trickle {
			go func() {
				for _, b := range hello {
					if _, err := nc.Write([]byte{b}); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
		}
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, nc)
		took := time.Since(start)
		require.NoError(t, err, "the server closed the connection")
		require.GreaterOrEqual(t, took, timeout-10*time.Millisecond)
		require.Less(t, took, timeout+time.Second, "cut after %v", took)
		nc.Close()
	}
	require.Zero(t, h.opens.Load())
	// The server's goroutines for the two connections are gone: counted by
	// name, since other tests' goroutines may come and go meanwhile.
	require.Eventually(t, func() bool {
		return goroutinesIn("gust.(*Server).serveConn") == 0 && countFDs(t) <= baseFDs
	}, 5*time.Second, 10*time.Millisecond, "serveConn goroutines %d, fds %d (were %d)",
		goroutinesIn("gust.(*Server).serveConn"), countFDs(t), baseFDs)
}

// A TLS connection whose descriptor cannot be duplicated stays in
// goroutine mode, counted, and works there: its crypto/tls reads and
// writes the connection its netpoll.Under wraps.
func TestTLSNetpollFallbackAtTheDescriptorLimit(t *testing.T) {
	m := &netpollCounts{}
	hookDup(t, func(c *Conn) error {
		if c.cfg.Metrics == Metrics(m) {
			return syscall.EMFILE
		}
		return nil
	})
	h := newEcho()
	addr := tlsNetpollMode.start(t, h, &Options{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	c := dialRaw(t, addr, nil)
	sc := h.waitOpen(t)
	require.False(t, sc.Netpoll())
	require.Equal(t, 1, m.get("fallback-fd"))
	p := bytes.Repeat([]byte("x"), 100<<10)
	c.send(frame(0x82, p))
	c.expectMessage(OpBinary, p)
	c.send(frame(0x88, closePayload(StatusNormalClosure, "")))
	c.expectClose(StatusNormalClosure)
	require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))
}

// TLS that gust does not make (a tls.NewListener of the caller's, net/http's
// on the Upgrader's path) stays in goroutine mode, counted as fallback-type:
// crypto/tls reads the connection it was made over for its life.
func TestTLSNetpollOnlyOverServeTLS(t *testing.T) {
	m := &netpollCounts{}
	h := newEcho()
	s := newServer(h, &Options{Netpoll: true, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runServer(t, s, tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{tlsServerCert()}}))
	c := dialRaw(t, "tls://"+ln.Addr().String(), nil)
	require.False(t, h.waitOpen(t).Netpoll())
	require.Equal(t, 1, m.get("fallback-type"))
	c.send(frame(0x81, []byte("still served")))
	c.expectMessage(OpText, []byte("still served"))
}

// A heartbeat's ping whose record the socket does not take (a peer that
// has stopped reading) is kept by the Under: the ping then goes to the
// outbox, whose writer writes it under WriteTimeout, which ends the
// connection here, instead of waiting for the next write.
func TestTLSNetpollHeartbeatPingKeptGoesToTheWriter(t *testing.T) {
	h := newRecorder()
	addr := tlsNetpollMode.start(t, h, &Options{PingInterval: time.Hour, PingTimeout: time.Hour, WriteTimeout: 300 * time.Millisecond})
	dialRaw(t, addr, nil) // and never reads
	sc := h.waitOpen(t)
	require.Eventually(t, func() bool { return parkedIdle(sc) }, 5*time.Second, time.Millisecond)

	// Fill the socket beneath TLS, so that the ping's record finds no room.
	raw, err := sc.sock().SyscallConn()
	require.NoError(t, err)
	// The whole send buffer, as the kernel would let it grow without the
	// unsent limit (unsentLimit): with it, the peer's window, still open
	// a little, takes more now and then, and the socket turns writable.
	require.NoError(t, raw.Control(func(fd uintptr) {
		require.NoError(t, syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, 0x19, 0)) // TCP_NOTSENT_LOWAT: the system's
	}))
	fillSocket(t, raw)

	start := time.Now()
	sc.hb.Fire()
	err = h.waitClose(t)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the outbox's writer waited for room under WriteTimeout")
	require.Less(t, time.Since(start), 5*time.Second)
}

// fillSocket writes to raw until it takes nothing, three looks in a row
// 20 ms apart: on a busy machine the peer's kernel takes bytes still in
// flight a while after the first refusal, and the room that frees would
// let a small write through.
func fillSocket(t *testing.T, raw syscall.RawConn) {
	t.Helper()
	junk := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for refused := 0; refused < 3; {
		took := 0
		require.NoError(t, raw.Control(func(fd uintptr) {
			for range 256 {
				n, again, err := netpoll.WriteFD(int(fd), junk)
				require.NoError(t, err)
				took += n
				if again {
					return
				}
			}
			t.Fatal("the socket never filled")
		}))
		if took == 0 {
			refused++
		} else {
			refused = 0
		}
		require.True(t, time.Now().Before(deadline), "the socket kept taking bytes")
		time.Sleep(20 * time.Millisecond) // a look's interval, under the deadline
	}
}
