package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gustws/gust"
)

// gust behind the reverse proxies users put in front of it (issue 36):
// nginx, HAProxy and Caddy (Debian's, and a current one from PyPI for h2 on
// the front), each started by the test on loopback with a configuration it
// writes (proxyconf_test.go), in front of a gust Server with HTTPHandler, in
// goroutine and in netpoll mode, with TLS ended at the proxy or carried on to
// gust (Server.ServeTLS), upstream keep-alive on. gust's client dials the
// proxy over wss:// (net/http's client for the plain route):
//
//   - echo, without and with permessage-deflate negotiated through the
//     proxy; a 16 MiB message each way; close codes both ways; pings both
//     ways;
//   - the HTTPHandler route on the same port, and a WebSocket on an upstream
//     connection that the proxy had used for a plain request first;
//   - the client's address in X-Forwarded-For, as OnRequest sees it, with a
//     forged entry the client sent itself;
//   - an idle WebSocket kept past the proxy's idle timeout by gust's
//     heartbeat (PingInterval), and one without heartbeat cut by the proxy;
//   - HAProxy and Caddy with h2 on the front: gust's client over RFC 8441 to
//     the proxy, HTTP/1.1 from the proxy to gust.

// dirProxy is the matrix's direction of these tests.
const dirProxy = "gust client → proxy → gust server"

// proxyColumns are the columns of the proxy table of the matrix.
var proxyColumns = []string{"echo", "deflate", "16 MiB each way", "close 4001", "server close 4002", "ping/pong",
	"HTTPHandler", "WebSocket on a reused upstream", "X-Forwarded-For", "idle kept by heartbeat", "idle cut by proxy",
	"h2 front (RFC 8441)"}

const proxyLegend = `Behind a proxy (proxy_test.go): gust's client dials the proxy over wss:// (the proxy's
certificate from a CA made for the run); the proxy speaks HTTP/1.1 to a gust Server with HTTPHandler,
over plain TCP ("TLS at proxy") or over TLS to Server.ServeTLS ("TLS to gust"), with upstream keep-alive.
- echo: text, 1 KiB binary and 1 MiB binary without compression, neither side compressed.
- deflate: permessage-deflate negotiated through the proxy (both sides' Conn.Compressed), 256 KiB of
  text echoed, under 64 KiB on gust's wire where gust's side is plain TCP.
- 16 MiB each way: one 16 MiB binary message (the default MaxMessageSize) echoed.
- close 4001 / server close 4002: the client closes with 4001, gust's OnClose sees it; the server
  closes with 4002 "server-bye", the client sees code and reason.
- ping/pong: the client's Conn.Ping and the server's, each answered through the proxy.
- HTTPHandler: GET /healthz through the proxy with net/http (and over h2 where the front has it).
- WebSocket on a reused upstream: a GET first, then a WebSocket whose handshake gust's OnRequest sees
  from the same upstream address (source port) as a plain request HTTPHandler served before. SKIP for
  Caddy: its upstream pool (Go's http.Transport) never sends an upgrade on a plain request's connection.
- X-Forwarded-For: the client connects from 127.0.0.7 and sends a forged X-Forwarded-For; OnRequest
  sees RemoteAddr 127.0.0.1 (the proxy) and takes the client's address from the last entry.
- idle kept by heartbeat: a WebSocket idle for 2.5x the proxy's idle timeout (2 s) is still open and
  echoes, kept by gust's heartbeat (PingInterval 300 ms, PingTimeout 700 ms); idle cut by proxy: without
  heartbeat the proxy cuts it after its timeout.
- h2 front: gust's client over HTTP/2 extended CONNECT (RFC 8441) to the proxy, which speaks HTTP/1.1
  to gust; n/a where the proxy has no such front (nginx).
`

func TestProxy(t *testing.T) {
	if skipRequested("proxies") {
		requirePeer(t, "proxies", dirProxy) // skips, loudly
	}
	ca, err := runCA()
	if err != nil {
		t.Fatalf("test certificate: %v", err)
	}
	start := time.Now()
	t.Cleanup(func() { t.Logf("the proxy matrix took %v", time.Since(start).Round(time.Millisecond)) })
	// The matrix's rows in this order, whichever ends first.
	for _, px := range proxyKinds {
		for _, m := range proxyModes {
			if px.err == nil {
				reserveRow(matrixRow{peer: px.label(), direction: dirProxy, path: "Server " + m.String()})
			}
		}
	}
	// Every proxy and mode at once, on goroutines of the test's own rather
	// than t.Parallel, which runs GOMAXPROCS subtests at a time (2 here):
	// most of the matrix waits on the network and on the proxies' clocks.
	together(t, proxyKinds, (*proxyKind).fullName, func(t *testing.T, px *proxyKind) {
		if px.err != nil {
			setCell(matrixRow{peer: px.fullName() + " (not available)", direction: dirProxy, path: "all"}, allColumns, "FAIL")
			t.Fatal(loud(fmt.Sprintf("%s FAILED: %s is not available: %v", t.Name(), px.fullName(), px.err),
				"scripts/install-interop proxies installs it (apt-get, PyPI); GUST_INTEROP_SKIP=proxies skips instead"))
		}
		t.Logf("%s (%s)", px.label(), px.bin)
		together(t, proxyModes, proxyMode.String, func(t *testing.T, m proxyMode) {
			row := matrixRow{peer: px.label(), direction: dirProxy, path: "Server " + m.String()}
			s := startProxied(t, px, ca, m.netpoll, m.tlsUpstream)
			var idle []proxyCase
			for _, pc := range proxyCases {
				switch {
				case pc.h2 && !px.h2Front:
				case pc.idle:
					idle = append(idle, pc) // they wait on the clock: together, after the others
				default:
					t.Run(pc.name, func(t *testing.T) {
						mark(t, row, pc.column)
						pc.run(t, s)
					})
				}
			}
			together(t, idle, func(pc proxyCase) string { return pc.name }, func(t *testing.T, pc proxyCase) {
				mark(t, row, pc.column)
				pc.run(t, s)
			})
		})
	})
}

// A proxyMode is how the gust Server behind the proxy runs.
type proxyMode struct{ netpoll, tlsUpstream bool }

var proxyModes = []proxyMode{{false, false}, {false, true}, {true, false}, {true, true}}

func (m proxyMode) String() string {
	return map[bool]string{false: "goroutine", true: "netpoll"}[m.netpoll] +
		map[bool]string{false: ", TLS at proxy", true: ", TLS to gust"}[m.tlsUpstream]
}

// reserveRow puts row in the matrix, with no cell yet.
func reserveRow(row matrixRow) {
	matrix.Lock()
	defer matrix.Unlock()
	if _, ok := matrix.cells[row]; !ok {
		matrix.order = append(matrix.order, row)
		matrix.cells[row] = make(map[string]string)
	}
}

// together runs f for each of items as subtests named by name, all at
// once, and returns when they have ended.
func together[T any](t *testing.T, items []T, name func(T) string, f func(*testing.T, T)) {
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name(it), func(t *testing.T) { f(t, it) })
		}()
	}
	wg.Wait()
}

// A proxyCase is one column of the proxy table.
type proxyCase struct {
	name, column string
	h2           bool // needs h2 on the front
	idle         bool // waits on the proxy's idle timeout; runs in parallel with the other such
	run          func(t *testing.T, s *proxied)
}

var proxyCases = []proxyCase{
	{name: "echo", column: "echo", run: proxyEcho},
	{name: "deflate", column: "deflate", run: proxyDeflate},
	{name: "16MiB", column: "16 MiB each way", run: proxyBig},
	{name: "close-4001", column: "close 4001", run: proxyClientClose},
	{name: "server-close-4002", column: "server close 4002", run: proxyServerClose},
	{name: "ping-pong", column: "ping/pong", run: proxyPingPong},
	{name: "http", column: "HTTPHandler", run: proxyHTTP},
	{name: "reused-upstream", column: "WebSocket on a reused upstream", run: proxyReusedUpstream},
	{name: "x-forwarded-for", column: "X-Forwarded-For", run: proxyForwardedFor},
	{name: "h2-front", column: "h2 front (RFC 8441)", h2: true, run: proxyH2Front},
	{name: "idle-kept", column: "idle kept by heartbeat", idle: true, run: proxyIdleKept},
	{name: "idle-cut", column: "idle cut by proxy", idle: true, run: proxyIdleCut},
}

// --- the gust side -----------------------------------------------------------

// proxiedEcho is a gust Server's handler behind the proxy: the echo server
// of server_test.go, with two more commands: "whoami" answers what OnRequest
// saw (a requestSeen in JSON), "ping" has the server ping the client and
// answer "server ping ok" once the pong is back.
type proxiedEcho struct {
	*echoServer
	pings sync.WaitGroup
}

// requestSeen is what gust saw of a WebSocket's handshake request, and of
// its connection.
type requestSeen struct {
	RemoteAddr string   `json:"remote_addr"`
	XFF        []string `json:"x_forwarded_for"`
	ClientAddr string   `json:"client_addr"` // clientAddr's answer, trusting 127.0.0.1
	Proto      string   `json:"proto"`
	Netpoll    bool     `json:"netpoll"`
}

func (h *proxiedEcho) OnMessage(c *gust.Conn, m *gust.Message) {
	switch {
	case m.Opcode == gust.OpText && string(m.Data) == "whoami":
		m.Close()
		seen, _ := c.Get("request")
		rs, _ := seen.(requestSeen)
		rs.Netpoll = c.Netpoll()
		b, _ := json.Marshal(rs)
		c.WriteMessage(gust.OpText, b)
	case m.Opcode == gust.OpText && string(m.Data) == "ping":
		m.Close()
		// Ping waits for the pong, which this connection's read loop
		// delivers: not on the loop's goroutine.
		h.pings.Add(1)
		go func() {
			defer h.pings.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if rtt, err := c.Ping(ctx); err != nil {
				c.WriteString("server ping failed: " + err.Error())
			} else {
				c.WriteString("server ping ok " + rtt.String())
			}
		}()
	default:
		h.echoServer.OnMessage(c, m)
	}
}

// trustedProxy is the address the proxies connect to gust from.
var trustedProxy = netip.MustParseAddr("127.0.0.1")

// clientAddr is the address of the client behind the proxy: the last
// X-Forwarded-For entry, which the proxy itself appended, when the request
// came from the proxy's address; RemoteAddr's host otherwise, since anyone
// else can write that header. docs/proxies.md shows it.
func clientAddr(r *http.Request, proxy netip.Addr) string {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	from, err := netip.ParseAddr(host)
	xff := r.Header.Values("X-Forwarded-For")
	if err != nil || from.Unmap() != proxy || len(xff) == 0 {
		return host
	}
	entries := strings.Split(xff[len(xff)-1], ",")
	return strings.TrimSpace(entries[len(entries)-1])
}

// proxied is a proxy in front of two gust Servers: gust (heartbeats on,
// HTTPHandler) behind / and /idle/, quiet (no heartbeat) behind /quiet/.
type proxied struct {
	px      *proxyKind
	netpoll bool
	base    string // https://127.0.0.1:port, the proxy
	roots   *x509.CertPool
	gust    *proxiedEcho
	quiet   *proxiedEcho
	proc    *proxyProc

	mu    sync.Mutex
	plain map[string]bool // the RemoteAddrs HTTPHandler served a request from
}

func startProxied(t *testing.T, px *proxyKind, ca *testCA, netpoll, tlsUpstream bool) *proxied {
	s := &proxied{px: px, netpoll: netpoll, roots: x509.NewCertPool(), plain: make(map[string]bool),
		gust: &proxiedEcho{echoServer: newEchoServer()}, quiet: &proxiedEcho{echoServer: newEchoServer()}}
	s.roots.AppendCertsFromPEM(ca.caPEM)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/healthz") {
			http.Error(w, "HTTPHandler got "+r.Method+" "+r.URL.Path+" (Upgrade: "+r.Header.Get("Upgrade")+")", http.StatusTeapot)
			return
		}
		s.mu.Lock()
		s.plain[r.RemoteAddr] = true
		s.mu.Unlock()
		io.WriteString(w, "ok")
	})
	gustAddr := serveBehindProxy(t, s.gust, ca, netpoll, tlsUpstream, proxyPingInterval, mux)
	quietAddr := serveBehindProxy(t, s.quiet, ca, netpoll, tlsUpstream, 0, nil)
	var port int
	s.proc, port = startProxy(t, px, ca, gustAddr, quietAddr, tlsUpstream)
	s.base = "https://127.0.0.1:" + strconv.Itoa(port)
	return s
}

// serveBehindProxy serves h with a gust Server on loopback (ServeTLS when
// tlsUpstream) and returns its address; the Server is shut down at the end
// of t, once the pings it started have ended.
func serveBehindProxy(t *testing.T, h *proxiedEcho, ca *testCA, netpoll, tlsUpstream bool, ping time.Duration, mux http.Handler) string {
	opts := serverOptions()
	opts.Netpoll = netpoll
	if ping > 0 {
		opts.PingInterval = ping
		opts.PingTimeout = proxyPingTimeout
	}
	s := &gust.Server{
		Upgrader: gust.Upgrader{Handler: h, Options: opts, CheckOrigin: loopbackOrigin,
			OnRequest: func(r *http.Request, _ http.Header, c *gust.Conn) error {
				c.Set("request", requestSeen{RemoteAddr: r.RemoteAddr, XFF: r.Header.Values("X-Forwarded-For"),
					ClientAddr: clientAddr(r, trustedProxy), Proto: r.Proto})
				return nil
			}},
		HTTPHandler: mux,
	}
	ln := listenLoopback(t)
	served := make(chan error, 1)
	if tlsUpstream {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{ca.leaf}}
		go func() { served <- s.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- s.Serve(ln) }()
	}
	t.Cleanup(func() {
		h.pings.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("gust Server.Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, gust.ErrServerClosed) {
			t.Errorf("gust Server.Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

// --- the client side ---------------------------------------------------------

// proxyClient is a gust client connection through the proxy, with the
// pings it answered counted.
type proxyClient struct {
	*clientConn
	pings atomic.Int32
}

func (pc *proxyClient) OnPing(c *gust.Conn, p []byte) {
	pc.pings.Add(1)
	c.WritePong(p)
}

type dialHow struct {
	compress bool
	h2       bool        // DialOptions.HTTP2
	from     string      // the client's own loopback address, when not the default
	header   http.Header // added to the handshake
}

// open dials path through the proxy, runs the ReadLoop until the end of t,
// labels the connection for the server's record, and checks with "whoami"
// that the server's connection is in the mode of its Server.
func (s *proxied) open(t *testing.T, path, label string, how dialHow) (*proxyClient, *http.Response, requestSeen) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc := &proxyClient{clientConn: &clientConn{msgs: make(chan wantMessage, 16), closed: make(chan error, 1)}}
	opts := &gust.DialOptions{
		Options:          gust.Options{Compression: gust.CompressionOptions{Enabled: how.compress}, CloseTimeout: 5 * time.Second},
		TLSConfig:        &tls.Config{RootCAs: s.roots},
		HTTP2:            how.h2,
		Header:           how.header,
		HandshakeTimeout: 30 * time.Second,
	}
	if how.from != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(how.from)}}
		opts.NetDialContext = d.DialContext
	}
	url := "wss" + strings.TrimPrefix(s.base, "https") + path
	c, resp, err := gust.Dial(ctx, url, pc, opts)
	if err != nil {
		t.Fatalf("gust.Dial %s through %s: %v", url, s.px.label(), err)
	}
	pc.c, pc.resp = c, resp
	runReadLoop(t, c)
	if err := pc.echo(textMsg("label:" + label)); err != nil {
		t.Fatalf("label: %v", err)
	}
	if err := pc.c.WriteString("whoami"); err != nil {
		t.Fatal(err)
	}
	m, err := pc.next(30 * time.Second)
	if err != nil {
		t.Fatalf("whoami: %v", err)
	}
	var seen requestSeen
	if err := json.Unmarshal(m.data, &seen); err != nil {
		t.Fatalf("whoami answered %q: %v", m.data, err)
	}
	if seen.Netpoll != s.netpoll {
		t.Errorf("gust's connection: Conn.Netpoll() = %v in a Server with Netpoll %v", seen.Netpoll, s.netpoll)
	}
	return pc, resp, seen
}

// closeNormally closes pc with 1000 and checks that gust's side saw it.
func (s *proxied) closeNormally(t *testing.T, h *proxiedEcho, pc *proxyClient, label string) *record {
	t.Helper()
	if err := pc.c.Close(gust.StatusNormalClosure, "done"); err != nil {
		t.Errorf("Close(1000): %v", err)
	}
	if err, ok := pc.waitClose(15 * time.Second); !ok {
		t.Errorf("no OnClose within 15s of Close(1000)")
	} else if err := expectCloseError(err, gust.StatusNormalClosure, ""); err != nil {
		t.Errorf("client: %v", err)
	}
	rec, err := h.wait(label, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := expectCloseError(rec.closeErr, gust.StatusNormalClosure, ""); err != nil {
		t.Errorf("server: %v", err)
	}
	return rec
}

// httpClient is net/http's client for the proxy's certificate, over h2
// when h2 is set and the proxy offers it.
func (s *proxied) httpClient(t *testing.T, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func (s *proxied) get(t *testing.T, client *http.Client, path string) *http.Response {
	t.Helper()
	resp, err := client.Get(s.base + path)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, s.px.label(), err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET %s through %s: %s %q (%v), want 200 \"ok\" from HTTPHandler", path, s.px.label(), resp.Status, body, err)
	}
	return resp
}

// --- the cases -----------------------------------------------------------------

func proxyEcho(t *testing.T, s *proxied) {
	pc, resp, _ := s.open(t, "/ws", t.Name(), dialHow{})
	if pc.c.Compressed() || resp.Header.Get("Sec-WebSocket-Extensions") != "" {
		t.Errorf("compression not offered, yet negotiated: %q", resp.Header.Get("Sec-WebSocket-Extensions"))
	}
	msgs := []wantMessage{textMsg(payloadText), binMsg(payloadBinary), binMsg(payloadLarge)}
	for _, m := range msgs {
		if err := pc.echo(m); err != nil {
			t.Fatal(err)
		}
	}
	rec := s.closeNormally(t, s.gust, pc, t.Name())
	if rec.compressed {
		t.Errorf("gust's side compressed a connection whose client did not offer it")
	}
	if len(rec.received) != len(msgs) {
		t.Errorf("gust received %s, want %d messages", describeAll(rec.received), len(msgs))
	}
}

func proxyDeflate(t *testing.T, s *proxied) {
	pc, resp, _ := s.open(t, "/ws", t.Name(), dialHow{compress: true})
	ext := resp.Header.Get("Sec-WebSocket-Extensions")
	if !strings.Contains(ext, "permessage-deflate") || !pc.c.Compressed() {
		t.Fatalf("permessage-deflate not negotiated through %s: response extensions %q, Conn.Compressed %v",
			s.px.label(), ext, pc.c.Compressed())
	}
	if err := pc.echo(textMsg(payloadCompressible)); err != nil {
		t.Fatal(err)
	}
	if err := pc.echo(textMsg("stats")); err != nil {
		t.Fatal(err)
	}
	rec := s.closeNormally(t, s.gust, pc, t.Name())
	if !rec.compressed {
		t.Errorf("the client negotiated permessage-deflate (%q) but gust's side is not compressed", ext)
	}
	if err := checkWire(rec.stats, rec.wireOK, rec.wireIn, rec.wireOut); err != nil {
		t.Errorf("gust's side of the proxy: %v", err)
	}
	t.Logf("negotiated %q; gust's side: %s", ext, wireNote(rec.wireOK, rec.wireIn, rec.wireOut))
}

// bigCases bounds the 16 MiB echoes that run at once: each is a few
// hundred MiB of copying, masking and TLS through the proxy.
var bigCases = make(chan struct{}, 2)

var payload16MiB = sync.OnceValue(func() []byte {
	b := make([]byte, 16<<20)
	for i := range b {
		b[i] = byte((i*31 + 7) % 253)
	}
	return b
})

func proxyBig(t *testing.T, s *proxied) {
	bigCases <- struct{}{}
	defer func() { <-bigCases }()
	pc, _, _ := s.open(t, "/ws", t.Name(), dialHow{})
	start := time.Now()
	if err := pc.echo(binMsg(payload16MiB())); err != nil {
		t.Fatal(err)
	}
	t.Logf("16 MiB each way in %v", time.Since(start).Round(time.Millisecond))
	rec := s.closeNormally(t, s.gust, pc, t.Name())
	if len(rec.received) != 1 || len(rec.received[0].data) != 16<<20 {
		t.Errorf("gust received %s, want one message of 16 MiB", describeAll(rec.received))
	}
}

func proxyClientClose(t *testing.T, s *proxied) {
	pc, _, _ := s.open(t, "/ws", t.Name(), dialHow{compress: true})
	if err := pc.echo(textMsg(payloadText)); err != nil {
		t.Fatal(err)
	}
	if err := pc.c.Close(4001, "client-bye"); err != nil {
		t.Fatalf("Close(4001): %v", err)
	}
	expectClosedBothSides(t, s, pc, "Close(4001)", 4001, "", "client-bye")
}

func proxyServerClose(t *testing.T, s *proxied) {
	pc, _, _ := s.open(t, "/ws", t.Name(), dialHow{compress: true})
	if err := pc.c.WriteString("close:4002"); err != nil {
		t.Fatal(err)
	}
	expectClosedBothSides(t, s, pc, "asking the server to close", 4002, "server-bye", "")
}

// expectClosedBothSides waits for the client's OnClose after what, and for
// the server's, and checks that each saw code with its reason.
func expectClosedBothSides(t *testing.T, s *proxied, pc *proxyClient, what string, code gust.StatusCode, clientReason, serverReason string) {
	t.Helper()
	err, ok := pc.waitClose(15 * time.Second)
	if !ok {
		t.Fatalf("no OnClose within 15s of %s", what)
	}
	if err := expectCloseError(err, code, clientReason); err != nil {
		t.Errorf("client: %v", err)
	}
	rec, err := s.gust.wait(t.Name(), 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := expectCloseError(rec.closeErr, code, serverReason); err != nil {
		t.Errorf("server: %v", err)
	}
}

func proxyPingPong(t *testing.T, s *proxied) {
	pc, _, _ := s.open(t, "/ws", t.Name(), dialHow{compress: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rtt, err := pc.c.Ping(ctx)
	if err != nil {
		t.Fatalf("the client's Ping through %s: %v", s.px.label(), err)
	}
	if err := pc.c.WriteString("ping"); err != nil {
		t.Fatal(err)
	}
	m, err := pc.next(30 * time.Second)
	if err != nil {
		t.Fatalf("the server's ping: %v", err)
	}
	if !strings.HasPrefix(string(m.data), "server ping ok") {
		t.Fatalf("the server's ping: %q", m.data)
	}
	if pc.pings.Load() == 0 {
		t.Errorf("the server's Ping answered, yet the client's OnPing never ran")
	}
	t.Logf("client ping %v; %s", rtt, m.data)
	s.closeNormally(t, s.gust, pc, t.Name())
}

func proxyHTTP(t *testing.T, s *proxied) {
	for range 2 {
		s.get(t, s.httpClient(t, false), "/healthz")
	}
	if s.px.h2Front {
		resp := s.get(t, s.httpClient(t, true), "/healthz")
		if resp.ProtoMajor != 2 {
			t.Errorf("GET /healthz with h2 offered: %s, want HTTP/2 from a front that has it", resp.Proto)
		}
	}
}

// proxyReusedUpstream: a plain request, then a WebSocket; the proxy puts
// the handshake on an idle upstream connection it had kept, which gust's
// net/http side had served (TestServerHTTPUpgradeAfterKeepAlive).
func proxyReusedUpstream(t *testing.T, s *proxied) {
	s.get(t, s.httpClient(t, false), "/healthz")
	pc, _, seen := s.open(t, "/ws", t.Name(), dialHow{compress: true})
	s.mu.Lock()
	reused := s.plain[seen.RemoteAddr]
	plain := len(s.plain)
	s.mu.Unlock()
	if !reused && s.px.freshUpgrades != "" {
		if err := pc.echo(textMsg(payloadText)); err != nil {
			t.Fatal(err)
		}
		s.closeNormally(t, s.gust, pc, t.Name())
		msg := loud(fmt.Sprintf("SKIPPED: %s: the WebSocket came on a new upstream connection (%s): %s",
			t.Name(), seen.RemoteAddr, s.px.freshUpgrades))
		fmt.Fprint(os.Stderr, msg)
		t.Skip(msg)
	}
	if !reused {
		t.Errorf("the WebSocket's handshake came from %s, not from an upstream connection HTTPHandler served "+
			"(%d of them): %s opened a new upstream connection for it", seen.RemoteAddr, plain, s.px.label())
	} else {
		t.Logf("the handshake came on %s, which carried a plain request before", seen.RemoteAddr)
	}
	if err := pc.echo(textMsg(payloadText)); err != nil {
		t.Fatal(err)
	}
	s.closeNormally(t, s.gust, pc, t.Name())
}

func proxyForwardedFor(t *testing.T, s *proxied) {
	const client, forged = "127.0.0.7", "203.0.113.9"
	pc, _, seen := s.open(t, "/ws", t.Name(), dialHow{from: client, header: http.Header{"X-Forwarded-For": {forged}}})
	host, _, _ := net.SplitHostPort(seen.RemoteAddr)
	if host != trustedProxy.String() {
		t.Errorf("RemoteAddr %s: want the proxy's address %s", seen.RemoteAddr, trustedProxy)
	}
	if seen.ClientAddr != client {
		t.Errorf("the client's address from X-Forwarded-For %q is %q, want %s", seen.XFF, seen.ClientAddr, client)
	}
	t.Logf("RemoteAddr %s, X-Forwarded-For %q: client %s", seen.RemoteAddr, seen.XFF, seen.ClientAddr)
	s.closeNormally(t, s.gust, pc, t.Name())
}

func proxyH2Front(t *testing.T, s *proxied) {
	pc, resp, seen := s.open(t, "/ws", t.Name(), dialHow{compress: true, h2: true})
	if resp.ProtoMajor != 2 {
		reason := fmt.Sprintf("%s answered the WebSocket over %s: no extended CONNECT (RFC 8441) on its h2 front, "+
			"gust's Dial fell back to HTTP/1.1", s.px.label(), resp.Proto)
		if s.px.h2Required {
			t.Fatal(reason)
		}
		s.closeNormally(t, s.gust, pc, t.Name())
		msg := loud("SKIPPED: " + t.Name() + ": " + reason)
		fmt.Fprint(os.Stderr, msg)
		t.Skip(msg)
	}
	if !pc.c.Compressed() {
		t.Errorf("permessage-deflate not negotiated over h2: %q", resp.Header.Get("Sec-WebSocket-Extensions"))
	}
	if seen.Proto != "HTTP/1.1" {
		t.Errorf("gust saw the handshake as %s, want HTTP/1.1 from the proxy", seen.Proto)
	}
	for _, m := range []wantMessage{textMsg(payloadText), binMsg(payloadLarge)} {
		if err := pc.echo(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := pc.c.Close(4001, "client-bye"); err != nil {
		t.Fatalf("Close(4001): %v", err)
	}
	if err, ok := pc.waitClose(15 * time.Second); !ok {
		t.Fatal("no OnClose within 15s of Close(4001)")
	} else if err := expectCloseError(err, 4001, ""); err != nil {
		t.Errorf("client: %v", err)
	}
	rec, err := s.gust.wait(t.Name(), 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := expectCloseError(rec.closeErr, 4001, "client-bye"); err != nil {
		t.Errorf("server: %v", err)
	}
	t.Logf("over %s to the proxy, %s to gust", resp.Proto, seen.Proto)
}

// proxyIdleKept: an idle WebSocket on /idle/, whose idle timeout is
// proxyIdle, outlives it by far, kept by gust's heartbeat. The wait is the
// thing tested: 2.5 times the proxy's timeout, with a heartbeat at least
// every PingInterval + PingTimeout (half the proxy's timeout).
func proxyIdleKept(t *testing.T, s *proxied) {
	pc, _, _ := s.open(t, "/idle/ws", t.Name(), dialHow{compress: true})
	idle := proxyIdle * 5 / 2
	if err, closed := pc.waitClose(idle); closed {
		t.Fatalf("cut within %v, despite gust's heartbeat (PingInterval %v, PingTimeout %v): %v", idle,
			proxyPingInterval, proxyPingTimeout, err)
	}
	if err := pc.echo(textMsg(payloadText)); err != nil {
		t.Fatalf("after %v idle: %v", idle, err)
	}
	pings := pc.pings.Load()
	if pings < 2 {
		t.Errorf("the client answered %d heartbeat pings in %v, want several", pings, idle)
	}
	t.Logf("open after %v idle (the proxy's timeout: %v), %d heartbeat pings answered", idle, proxyIdle, pings)
	s.closeNormally(t, s.gust, pc, t.Name())
}

// proxyIdleCut: the same idle WebSocket on /quiet/, to a Server without
// heartbeat, is cut by the proxy once its timeout has passed.
func proxyIdleCut(t *testing.T, s *proxied) {
	pc, _, _ := s.open(t, "/quiet/ws", t.Name(), dialHow{compress: true})
	start := time.Now()
	err, closed := pc.waitClose(proxyIdle + 20*time.Second)
	elapsed := time.Since(start)
	if !closed {
		t.Fatalf("%s did not cut an idle WebSocket within %v (its idle timeout: %v)", s.px.label(), elapsed, proxyIdle)
	}
	// The proxies stamp activity with the time their event loop woke at,
	// which a busy machine makes stale: seen from here they cut up to a few
	// hundred milliseconds early (HAProxy: 1.79 s of its 2 s). Half the
	// timeout still tells their cut from anything that would cut at once.
	if elapsed < proxyIdle/2 {
		t.Errorf("cut after %v idle, long before the proxy's timeout (%v): %v", elapsed, proxyIdle, err)
	}
	if gust.CloseStatus(err) == 1000 {
		t.Errorf("the client's OnClose got a normal close, want the proxy's cut: %v", err)
	}
	rec, werr := s.quiet.wait(t.Name(), 15*time.Second)
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("cut after %v idle (the proxy's timeout: %v); client: %v; gust: %v", elapsed.Round(time.Millisecond), proxyIdle, err, rec.closeErr)
}
