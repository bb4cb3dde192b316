package gust

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/testkit"
)

// The tests speak the wire protocol through rawClient, written from RFC 6455
// alone, so that they check gust against the RFC rather than against itself.

// serverMode is one way to serve gust connections; most tests run over all.
type serverMode struct {
	name string
	path string // "upgrader", "server" or "h2": the name without "-netpoll"
	// serve serves connections to h with the connection options opts and
	// the handshake settings set puts on the Upgrader (set may be nil).
	serve func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) (addr string)
}

// start serves connections to h with the connection options opts.
func (m serverMode) start(t *testing.T, h Event, opts *Options) string {
	t.Helper()
	return m.serve(t, h, opts, nil)
}

var serverModes = []serverMode{
	{"upgrader", "upgrader", serveUpgrader},
	{"server", "server", serveServer},
	{"upgrader-netpoll", "upgrader", inNetpoll(serveUpgrader)},
	{"server-netpoll", "server", inNetpoll(serveServer)},
}

// inNetpoll serves as serve does, in netpoll mode (Options.Netpoll).
func inNetpoll(serve func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string) func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
	return func(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
		t.Helper()
		o := Options{}
		if opts != nil {
			o = *opts
		}
		o.Netpoll = true
		return serve(t, h, &o, set)
	}
}

func startUpgrader(t *testing.T, h Event, opts *Options) string {
	t.Helper()
	return serveUpgrader(t, h, opts, nil)
}

func startServer(t *testing.T, h Event, opts *Options) string {
	t.Helper()
	return serveServer(t, h, opts, nil)
}

func serveUpgrader(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
	t.Helper()
	u := newUpgrader(h, opts)
	if set != nil {
		set(u)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

func serveServer(t *testing.T, h Event, opts *Options, set func(*Upgrader)) string {
	t.Helper()
	s := newServer(h, opts)
	if set != nil {
		set(&s.Upgrader)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runServer(t, s, ln)
	return ln.Addr().String()
}

func forEachMode(t *testing.T, f func(t *testing.T, m serverMode)) {
	for _, m := range serverModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// forEachTCPMode runs f over the server modes whose clients speak
// WebSocket straight over a TCP connection to the address: the tests that
// use it dial, reset or half-close that connection themselves.
func forEachTCPMode(t *testing.T, f func(t *testing.T, m serverMode)) {
	for _, m := range append(serverModes[:len(serverModes):len(serverModes)], tlsStreamModes...) {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// forEachTCPModeParallel is forEachTCPMode with the modes side by side:
// for tests that wait out a timeout in each mode and share no global state
// (hooks, fanoutBackToBack, GOMAXPROCS).
func forEachTCPModeParallel(t *testing.T, f func(t *testing.T, m serverMode)) {
	for _, m := range append(serverModes[:len(serverModes):len(serverModes)], tlsStreamModes...) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			f(t, m)
		})
	}
}

// tlsStreamModes are the TLS modes forEachTCPMode runs too (Linux): their
// clients dial TLS over TCP (dialRaw), and a test that reaches the TCP
// connection under it does so with tcpOf.
var tlsStreamModes []serverMode

type rawClient struct {
	t        *testing.T
	nc       net.Conn
	br       *bufio.Reader
	lastResp *http.Response

	closeSent bool // a frame sent began with a close: expectClose must not answer again
}

func handshakeRequest(addr string, extra ...string) string {
	addr = strings.TrimPrefix(addr, "tls://")
	var key [16]byte
	rand.Read(key[:])
	s := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) + "\r\n"
	for _, h := range extra {
		s += h + "\r\n"
	}
	return s + "\r\n"
}

// dialRaw connects and completes the handshake; after is sent in the same
// write as the request.
func dialRaw(t *testing.T, addr string, after []byte, headers ...string) *rawClient {
	t.Helper()
	if strings.HasPrefix(addr, "h2://") {
		return dialH2(t, addr, after, headers...)
	}
	if strings.HasPrefix(addr, "tls://") {
		return dialTLS(t, addr, after, headers...)
	}
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = nc.Write(append([]byte(handshakeRequest(addr, headers...)), after...))
	require.NoError(t, err)
	c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	c.lastResp = resp
	return c
}

// frame encodes a client frame: masked, with the given first byte.
func frame(b0 byte, payload []byte) []byte {
	return encodeFrame(b0, payload, true)
}

func encodeFrame(b0 byte, payload []byte, masked bool) []byte {
	var out []byte
	out = append(out, b0)
	mbit := byte(0)
	if masked {
		mbit = 0x80
	}
	n := len(payload)
	switch {
	case n <= 125:
		out = append(out, mbit|byte(n))
	case n <= 0xffff:
		out = append(out, mbit|126, byte(n>>8), byte(n))
	default:
		out = append(out, mbit|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if !masked {
		return append(out, payload...)
	}
	var key [4]byte
	rand.Read(key[:])
	out = append(out, key[:]...)
	for i, b := range payload {
		out = append(out, b^key[i&3])
	}
	return out
}

func (c *rawClient) send(b ...[]byte) {
	c.t.Helper()
	for _, p := range b {
		_, err := c.nc.Write(p)
		require.NoError(c.t, err)
		if len(p) > 0 && Opcode(p[0]&0x0f) == opClose {
			c.closeSent = true
		}
	}
}

// readFrame reads one server frame and checks it is not masked.
func (c *rawClient) readFrame() (b0 byte, payload []byte, err error) {
	f, err := readWireFrame(c.br)
	if err == nil && f.masked {
		err = errors.New("server frame masked")
	}
	return f.b0, f.payload, err
}

// wireFrame is one frame as it was on the wire, its payload unmasked.
type wireFrame struct {
	b0      byte
	masked  bool
	key     [4]byte // the masking key, when masked
	payload []byte
}

// readWireFrame reads one frame, masked or not, from r. The end of r
// inside a frame is io.ErrUnexpectedEOF; the payload is read as it
// arrives, so that a length the bytes do not back allocates nothing.
func readWireFrame(r io.Reader) (wireFrame, error) {
	var f wireFrame
	var h [10]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return f, err
	}
	f.b0, f.masked = h[0], h[1]&0x80 != 0
	n := uint64(h[1] & 0x7f)
	var err error
	switch n {
	case 126:
		_, err = io.ReadFull(r, h[2:4])
		n = uint64(binary.BigEndian.Uint16(h[2:]))
	case 127:
		_, err = io.ReadFull(r, h[2:10])
		n = binary.BigEndian.Uint64(h[2:])
	}
	if err == nil && f.masked {
		_, err = io.ReadFull(r, f.key[:])
	}
	if err == nil && n > math.MaxInt64 {
		err = fmt.Errorf("frame length %d", n)
	}
	if err == nil {
		var payload bytes.Buffer
		_, err = io.CopyN(&payload, r, int64(n))
		f.payload = payload.Bytes()
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return f, err
	}
	if f.payload == nil {
		f.payload = []byte{}
	}
	for i := range f.payload {
		f.payload[i] ^= f.key[i&3]
	}
	return f, nil
}

// expectMessage reads one final data frame and checks it.
func (c *rawClient) expectMessage(op Opcode, want []byte) {
	c.t.Helper()
	b0, p, err := c.readFrame()
	require.NoError(c.t, err)
	require.Equal(c.t, byte(0x80)|byte(op), b0)
	require.Equal(c.t, len(want), len(p))
	require.Equal(c.t, want, p)
}

// expectClose reads frames until a close frame, checks its code, and then
// checks that the server closes the TCP connection.
func (c *rawClient) expectClose(code StatusCode) {
	c.t.Helper()
	for {
		b0, p, err := c.readFrame()
		require.NoError(c.t, err, "waiting for close %d", code)
		if Opcode(b0&0x0f) != opClose {
			continue
		}
		require.Equal(c.t, byte(0x88), b0)
		if code == StatusNoStatusReceived {
			require.Empty(c.t, p)
		} else {
			require.GreaterOrEqual(c.t, len(p), 2)
			require.Equal(c.t, code, StatusCode(binary.BigEndian.Uint16(p)), "close reason %q", p[2:])
		}
		// Answer with the same code, as a client does, unless it sent a
		// close frame first (RFC 6455 §5.5.1: nothing may follow a close
		// frame; a second one would reach a socket the server has closed and
		// make it reset the connection), then expect the server to close TCP.
		if !c.closeSent {
			c.nc.Write(frame(0x88, p[:min(len(p), 2)]))
		}
		break
	}
	_, err := c.br.ReadByte()
	require.ErrorIs(c.t, err, io.EOF)
	c.nc.Close()
}

func (c *rawClient) rawRequest(req string) *http.Response {
	c.t.Helper()
	_, err := io.WriteString(c.nc, req)
	require.NoError(c.t, err)
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(c.t, err)
	return resp
}

func repeat(s string, n int) []byte { return []byte(strings.Repeat(s, n)) }

func newBufReader(nc net.Conn) *bufio.Reader { return bufio.NewReader(nc) }

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (a, b *net.TCPConn) { return testkit.TCPPair(t) }

// plainConn hides the net.Conn's other methods (SyscallConn, CloseWrite),
// as a wrapped or non-TCP connection does.
type plainConn struct{ net.Conn }

// newLogger is a Logger that writes text records to w, at level Info.
func newLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// newUpgrader is an Upgrader for h with the connection options opts.
func newUpgrader(h Event, opts *Options) *Upgrader {
	u := &Upgrader{Handler: h}
	if opts != nil {
		u.Options = *opts
	}
	return u
}

// newServer is a Server for h with the connection options opts.
func newServer(h Event, opts *Options) *Server {
	s := &Server{}
	s.Upgrader.Handler = h
	if opts != nil {
		s.Upgrader.Options = *opts
	}
	return s
}

// runServer serves s on ln until the test ends, then closes it and checks
// that Serve returned ErrServerClosed.
func runServer(t *testing.T, s *Server, ln net.Listener) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	})
}

// assertEventually polls cond every 10ms until it holds or d passes.
func assertEventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
