//go:build linux

package gust

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust/internal/handshake"
	"github.com/stretchr/testify/require"
)

// A TLS record that has begun is bounded as a message that has begun is
// (Options.MessageTimeout), on the TLS gust makes: Server.ServeTLS in both
// modes, and a wss:// Dial in both modes. crypto/tls holds a record until
// it is whole, and would otherwise wait for its rest for ever, holding the
// record's buffer: a peer that sends a record's header, or part of a
// record, and nothing more, is cut once the bound has passed, and what it
// held is freed. A peer whose records come in time, however quiet between
// them, is not cut. The TLS handshake is bounded by HandshakeTimeout.

// recordHeader is the header of a TLS application-data record that
// announces length bytes.
func recordHeader(length int) []byte {
	return []byte{23, 3, 3, byte(length >> 8), byte(length)}
}

// tlsServerModes are the Server's TLS paths: ServeTLS in goroutine mode and
// in netpoll mode.
var tlsServerModes = []serverMode{
	{"server-tls", "tls", serveTLSServer},
	tlsNetpollMode,
}

func TestMessageTimeoutEndsATLSRecordThatNeverFinishes(t *testing.T) {
	const bound = 300 * time.Millisecond
	for _, m := range tlsServerModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // waits on timers: the modes wait side by side
			h := newEcho()
			// Each *tls.Conn, which holds the record's bytes, is freed once
			// its connection has ended.
			var freed atomic.Int32
			h.open = func(c *Conn) {
				runtime.AddCleanup(c.NetConn().(*tls.Conn), func(*atomic.Int32) { freed.Add(1) }, &freed)
			}
			addr := m.serve(t, h, &Options{MessageTimeout: bound}, func(u *Upgrader) { u.HandshakeTimeout = bound })
			host := strings.TrimPrefix(addr, "tls://")

			// A connection whose records come in time stays open: quiet for
			// longer than the bound, and a record in two pieces 50 ms apart.
			quiet := dialTLSTap(t, host)
			h.waitOpen(t)

			type cut struct {
				name  string
				write func(t *testing.T) (raw net.Conn)
				open  bool // the WebSocket opens before the record is cut
			}
			cuts := []cut{
				{"header after the WebSocket opened", func(t *testing.T) net.Conn {
					c := dialTLSTap(t, host)
					_, err := c.raw.Write(recordHeader(16 << 10))
					require.NoError(t, err)
					return c.raw
				}, true},
				{"half a record after the WebSocket opened", func(t *testing.T) net.Conn {
					c := dialTLSTap(t, host)
					rec := c.tap.sealed(t, c.tc, frame(0x82, repeat("r", 1000)))
					_, err := c.raw.Write(rec[:len(rec)/2])
					require.NoError(t, err)
					return c.raw
				}, true},
				{"header in the TLS handshake", func(t *testing.T) net.Conn {
					raw, err := net.Dial("tcp", host)
					require.NoError(t, err)
					t.Cleanup(func() { raw.Close() })
					_, err = raw.Write([]byte{22, 3, 1, 2, 0}) // a ClientHello's record header, 512 bytes announced
					require.NoError(t, err)
					return raw
				}, false},
			}
			ended := make(chan time.Duration, len(cuts))
			for _, tc := range cuts {
				start := time.Now()
				raw := tc.write(t)
				if tc.open {
					h.waitOpen(t)
				}
				go func() {
					// The server closes its end: the client reads to EOF (or a
					// reset, once the server has lingered).
					raw.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, err := io.Copy(io.Discard, raw)
					if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
						ended <- -1
						return
					}
					ended <- time.Since(start)
				}()
			}

			// The quiet connection sends a record in two pieces meanwhile.
			rec := quiet.tap.sealed(t, quiet.tc, frame(0x82, []byte("in time")))
			_, err := quiet.raw.Write(rec[:3])
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond) // a record that takes its time, well within the bound
			_, err = quiet.raw.Write(rec[3:])
			require.NoError(t, err)
			quiet.expectMessage(OpBinary, []byte("in time"))

			for range 2 { // the two that opened
				err := h.waitClose(t)
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
				var pe *ProtocolError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, StatusPolicyViolation, pe.Code)
			}
			for _, tc := range cuts {
				took := <-ended
				require.NotEqual(t, time.Duration(-1), took, "%s: the server never closed the connection", tc.name)
				// The bound is counted on a millisecond clock (clockMS),
				// whose truncation may end it up to a millisecond early.
				require.GreaterOrEqual(t, took, bound-10*time.Millisecond, "%s: cut after %v", tc.name, took)
				require.Less(t, took, bound+3*time.Second, "%s: cut after %v", tc.name, took)
			}

			// The quiet connection, quiet for longer than the bound again,
			// is still served.
			quiet.send(frame(0x82, []byte("still here")))
			quiet.expectMessage(OpBinary, []byte("still here"))
			quiet.send(frame(0x88, closePayload(StatusNormalClosure, "")))
			quiet.expectClose(StatusNormalClosure)
			require.Equal(t, StatusNormalClosure, CloseStatus(h.waitClose(t)))

			// Nothing of the connections is left: no goroutine serves them,
			// and the garbage collector frees their TLS state.
			require.Eventually(t, func() bool {
				runtime.GC()
				return freed.Load() == 3 && goroutinesIn("gust.(*Server).serveConn") == 0 &&
					goroutinesIn("gust.(*Conn).end") == 0 && goroutinesIn("gust.(*loopConn).resume") == 0
			}, 5*time.Second, 10*time.Millisecond, "%d of 3 freed", freed.Load())
		})
	}
}

// tlsTapClient is a raw WebSocket client over TLS whose TCP connection
// the test writes to beneath crypto/tls.
type tlsTapClient struct {
	*rawClient
	raw net.Conn
	tap *tapConn
	tc  *tls.Conn
}

// dialTLSTap connects to host with TLS and opens a WebSocket.
func dialTLSTap(t *testing.T, host string) *tlsTapClient {
	t.Helper()
	raw, err := net.Dial("tcp", host)
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	tp := &tapConn{Conn: raw}
	tc := tls.Client(tp, &tls.Config{InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: tc, br: bufio.NewReader(tc)}
	c.rawRequest(handshakeRequest(host))
	return &tlsTapClient{rawClient: c, raw: raw, tap: tp, tc: tc}
}

// A wss:// client's connection is bounded the same way, in both modes: a
// server that answers the handshake and then sends a record's header and
// nothing more is cut at the bound.
func TestMessageTimeoutEndsATLSRecordThatNeverFinishesOnTheClient(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	cfg := &tls.Config{Certificates: []tls.Certificate{tlsServerCert()}}
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer raw.Close()
				tc := tls.Server(raw, cfg)
				br := bufio.NewReader(tc)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.WriteString(tc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
					"Sec-WebSocket-Accept: "+handshake.AcceptKey(req.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n")
				raw.Write(recordHeader(16 << 10))
				raw.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, raw) // until the client closes
			}()
		}
	}()
	for _, netpoll := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "netpoll"}[netpoll], func(t *testing.T) {
			t.Parallel()
			h := newRecorder()
			opts := &DialOptions{TLSConfig: &tls.Config{InsecureSkipVerify: true}}
			opts.Options = Options{MessageTimeout: bound, Netpoll: netpoll}
			start := time.Now() // the header may come with the 101
			c, _, err := Dial(testContext(t), "wss://"+ln.Addr().String()+"/", h, opts)
			require.NoError(t, err)
			require.Equal(t, netpoll, c.Netpoll())
			done := make(chan struct{})
			go func() {
				c.ReadLoop()
				close(done)
			}()
			err = h.waitClose(t)
			took := time.Since(start)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
			require.GreaterOrEqual(t, took, bound-10*time.Millisecond)
			require.Less(t, took, bound+3*time.Second)
			<-done
		})
	}
}
