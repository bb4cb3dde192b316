package gust

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Dial through a proxy, end to end; internal/proxy tests the protocols'
// details against scripted proxies.
//
// Two small but real proxies for the tests, written from their RFCs: an
// HTTP CONNECT proxy (RFC 9110 §9.3.6, Basic credentials) and a SOCKS5
// proxy (RFC 1928, RFC 1929). They resolve host names through a map, the
// way a real proxy resolves them through DNS, and relay bytes both ways.

// testProxy is what both proxies share: the listener, the relays, what
// they saw.
type testProxy struct {
	t     *testing.T
	ln    net.Listener
	user  string // credentials the proxy requires; none when user is ""
	pass  string
	hosts map[string]string // host name → IP address

	relayed atomic.Int64 // bytes relayed, both ways
	mu      sync.Mutex
	seen    []proxyRecord
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// proxyRecord is one tunnel request as the proxy saw it.
type proxyRecord struct {
	target   string // as the client asked: host:port
	addrType byte   // SOCKS5 ATYP
	user     string // the username the client authenticated with
	auth     string // HTTP Proxy-Authorization
}

func startTestProxy(t *testing.T, hosts map[string]string, serve func(p *testProxy, nc net.Conn)) *testProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &testProxy{t: t, ln: ln, hosts: hosts, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(nc)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer nc.Close()
				serve(p, nc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for nc := range p.conns {
			nc.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *testProxy) track(nc net.Conn) {
	p.mu.Lock()
	p.conns[nc] = struct{}{}
	p.mu.Unlock()
}

func (p *testProxy) record(r proxyRecord) {
	p.mu.Lock()
	p.seen = append(p.seen, r)
	p.mu.Unlock()
}

func (p *testProxy) records() []proxyRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxyRecord(nil), p.seen...)
}

func (p *testProxy) url(scheme string, user *url.Userinfo) *url.URL {
	return &url.URL{Scheme: scheme, Host: p.ln.Addr().String(), User: user}
}

// dial connects to host:port, resolving host through the proxy's map.
func (p *testProxy) dial(host string, port string) (net.Conn, error) {
	if ip, ok := p.hosts[host]; ok {
		host = ip
	}
	nc, err := net.Dial("tcp", net.JoinHostPort(host, port))
	if err == nil {
		p.track(nc)
	}
	return nc, err
}

// relay copies bytes both ways until either side ends, counting them as
// they pass; client may hold bytes read ahead.
func (p *testProxy) relay(client io.Reader, clientConn, upstream net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(countingWriter{upstream, &p.relayed}, client)
		upstream.Close()
	}()
	io.Copy(countingWriter{clientConn, &p.relayed}, upstream)
	clientConn.Close()
	wg.Wait()
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// serveConnect is the HTTP CONNECT proxy.
func serveConnect(p *testProxy, nc net.Conn) {
	br := bufio.NewReader(nc)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	rec := proxyRecord{target: req.RequestURI, auth: req.Header.Get("Proxy-Authorization")}
	p.record(rec)
	if req.Method != http.MethodConnect {
		io.WriteString(nc, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	if p.user != "" && rec.auth != "Basic "+base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass)) {
		io.WriteString(nc, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n")
		return
	}
	host, port, err := net.SplitHostPort(req.RequestURI)
	if err != nil {
		io.WriteString(nc, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := p.dial(host, port)
	if err != nil {
		io.WriteString(nc, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	io.WriteString(nc, "HTTP/1.1 200 Connection Established\r\n\r\n")
	p.relay(br, nc, up)
}

// socksProxy settings beyond testProxy's.
type socksProxy struct {
	replyDomain bool // answer with a domain-name BND.ADDR rather than IPv4
}

// serveSOCKS5 returns the SOCKS5 proxy.
func serveSOCKS5(opt socksProxy) func(p *testProxy, nc net.Conn) {
	return func(p *testProxy, nc net.Conn) {
		var hdr [2]byte
		if _, err := io.ReadFull(nc, hdr[:]); err != nil || hdr[0] != 5 {
			return
		}
		methods := make([]byte, hdr[1])
		if _, err := io.ReadFull(nc, methods); err != nil {
			return
		}
		want := byte(0x00)
		if p.user != "" {
			want = 0x02
		}
		offered := false
		for _, m := range methods {
			offered = offered || m == want
		}
		if !offered {
			nc.Write([]byte{5, 0xff})
			return
		}
		nc.Write([]byte{5, want})
		rec := proxyRecord{}
		if want == 0x02 {
			// RFC 1929: VER ULEN UNAME PLEN PASSWD
			var b [2]byte
			if _, err := io.ReadFull(nc, b[:]); err != nil || b[0] != 1 {
				return
			}
			name := make([]byte, b[1])
			io.ReadFull(nc, name)
			io.ReadFull(nc, b[:1])
			pass := make([]byte, b[0])
			if _, err := io.ReadFull(nc, pass); err != nil {
				return
			}
			rec.user = string(name)
			if string(name) != p.user || string(pass) != p.pass {
				p.record(rec)
				nc.Write([]byte{1, 1})
				return
			}
			nc.Write([]byte{1, 0})
		}
		// VER CMD RSV ATYP DST.ADDR DST.PORT
		var req [4]byte
		if _, err := io.ReadFull(nc, req[:]); err != nil || req[0] != 5 {
			return
		}
		rec.addrType = req[3]
		var host string
		switch req[3] {
		case 1, 4:
			ip := make([]byte, 4)
			if req[3] == 4 {
				ip = make([]byte, 16)
			}
			io.ReadFull(nc, ip)
			host = net.IP(ip).String()
		case 3:
			var n [1]byte
			io.ReadFull(nc, n[:])
			name := make([]byte, n[0])
			io.ReadFull(nc, name)
			host = string(name)
		default:
			nc.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		var port [2]byte
		if _, err := io.ReadFull(nc, port[:]); err != nil {
			return
		}
		portStr := strconv.Itoa(int(binary.BigEndian.Uint16(port[:])))
		rec.target = net.JoinHostPort(host, portStr)
		p.record(rec)
		if req[1] != 1 {
			nc.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		up, err := p.dial(host, portStr)
		if err != nil {
			nc.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		if opt.replyDomain {
			nc.Write(append([]byte{5, 0, 0, 3, 9}, "localhost\x00\x00"...))
		} else {
			nc.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0})
		}
		p.relay(nc, nc, up)
	}
}

// proxiedEcho starts a gust echo server and returns the URL a proxy must
// resolve: the host name gust.test, which only the proxies know.
func proxiedEcho(t *testing.T) (wsURL string, hosts map[string]string) {
	addr := startServer(t, newEcho(), &Options{Compression: CompressionOptions{Enabled: true}})
	_, port, _ := net.SplitHostPort(addr)
	return "ws://gust.test:" + port + "/via-proxy", map[string]string{"gust.test": "127.0.0.1"}
}

func echoOnce(t *testing.T, wsURL string, opts *DialOptions) {
	t.Helper()
	c, _, h := dialTest(t, wsURL, opts)
	require.True(t, c.Compressed())
	msg := []byte("through the proxy")
	require.NoError(t, c.WriteMessage(OpText, msg))
	h.expectMessage(t, OpText, msg)
	big := randomBytes(256 << 10)
	require.NoError(t, c.WriteMessage(OpBinary, big))
	h.expectMessage(t, OpBinary, big)
}

func compressed() Options { return Options{Compression: CompressionOptions{Enabled: true}} }

func TestDialThroughHTTPConnectProxy(t *testing.T) {
	t.Parallel()
	wsURL, hosts := proxiedEcho(t)
	u, err := url.Parse(wsURL)
	require.NoError(t, err)
	port := u.Port()
	p := startTestProxy(t, hosts, serveConnect)
	p.user, p.pass = "alice", "s3cr:et"

	t.Run("with credentials", func(t *testing.T) {
		opts := &DialOptions{Options: compressed(), Proxy: http.ProxyURL(p.url("http", url.UserPassword("alice", "s3cr:et")))}
		echoOnce(t, wsURL, opts)
		recs := p.records()
		require.Len(t, recs, 1)
		require.Equal(t, "gust.test:"+port, recs[0].target)
		require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:s3cr:et")), recs[0].auth)
		// The proxy counts a chunk once its write returns, which may be
		// after the echo reached the client.
		require.Eventually(t, func() bool { return p.relayed.Load() > 2*256<<10 }, 5*time.Second, time.Millisecond)
	})
	t.Run("wrong credentials", func(t *testing.T) {
		opts := &DialOptions{Proxy: http.ProxyURL(p.url("http", url.UserPassword("alice", "nope")))}
		_, resp, err := Dial(testContext(t), wsURL, nil, opts)
		require.Nil(t, resp)
		require.ErrorContains(t, err, "407 Proxy Authentication Required")
		require.NotContains(t, err.Error(), "nope", "the password must not show in errors")
	})
	t.Run("target down", func(t *testing.T) {
		opts := &DialOptions{Proxy: http.ProxyURL(p.url("http", url.UserPassword("alice", "s3cr:et")))}
		_, _, err := Dial(testContext(t), "ws://gust.test:1/", nil, opts)
		require.ErrorContains(t, err, "502 Bad Gateway")
	})
	t.Run("Proxy chooses per request", func(t *testing.T) {
		var asked []string
		opts := &DialOptions{Options: compressed(), Proxy: func(r *http.Request) (*url.URL, error) {
			asked = append(asked, r.URL.Scheme+"://"+r.URL.Host)
			return nil, nil // direct
		}}
		addr := startServer(t, newEcho(), nil)
		dialTest(t, "ws://"+addr+"/x", opts)
		require.Equal(t, []string{"http://" + addr}, asked)
	})
	t.Run("Proxy error", func(t *testing.T) {
		opts := &DialOptions{Proxy: func(*http.Request) (*url.URL, error) { return nil, errors.New("no route") }}
		_, _, err := Dial(testContext(t), wsURL, nil, opts)
		require.ErrorContains(t, err, "no route")
	})
}

func TestDialWSSThroughHTTPConnectProxy(t *testing.T) {
	t.Parallel()
	cert, pool := testCert(t, "gust.test")
	addr, sni := startTLSServer(t, newEcho(), &Options{Compression: CompressionOptions{Enabled: true}}, cert)
	_, port, _ := net.SplitHostPort(addr)
	p := startTestProxy(t, map[string]string{"gust.test": "127.0.0.1"}, serveConnect)
	var asked string
	opts := &DialOptions{
		Options:   Options{Compression: CompressionOptions{Enabled: true}},
		TLSConfig: &tls.Config{RootCAs: pool},
		Proxy: func(r *http.Request) (*url.URL, error) {
			asked = r.URL.Scheme
			return p.url("http", nil), nil
		},
	}
	echoOnce(t, "wss://gust.test:"+port+"/", opts)
	require.Equal(t, "https", asked)
	require.Equal(t, "gust.test", <-sni)
	require.Equal(t, "gust.test:"+port, p.records()[0].target)
	require.Empty(t, p.records()[0].auth)
}

func TestDialThroughSOCKS5Proxy(t *testing.T) {
	t.Parallel()
	wsURL, hosts := proxiedEcho(t)
	u, err := url.Parse(wsURL)
	require.NoError(t, err)

	t.Run("no authentication, host name sent to the proxy", func(t *testing.T) {
		p := startTestProxy(t, hosts, serveSOCKS5(socksProxy{}))
		echoOnce(t, wsURL, &DialOptions{Options: compressed(), Proxy: http.ProxyURL(p.url("socks5", nil))})
		recs := p.records()
		require.Len(t, recs, 1)
		require.Equal(t, byte(3), recs[0].addrType)
		require.Equal(t, u.Host, recs[0].target)
		// The proxy counts a chunk once its write returns, which may be
		// after the echo reached the client.
		require.Eventually(t, func() bool { return p.relayed.Load() > 2*256<<10 }, 5*time.Second, time.Millisecond)
	})
	t.Run("username and password", func(t *testing.T) {
		p := startTestProxy(t, hosts, serveSOCKS5(socksProxy{replyDomain: true}))
		p.user, p.pass = "bob", "hunter2"
		echoOnce(t, wsURL, &DialOptions{Options: compressed(), Proxy: http.ProxyURL(p.url("socks5h", url.UserPassword("bob", "hunter2")))})
		recs := p.records()
		require.Len(t, recs, 1)
		require.Equal(t, "bob", recs[0].user)
		require.Equal(t, u.Host, recs[0].target)
	})
	t.Run("IPv4 target", func(t *testing.T) {
		p := startTestProxy(t, nil, serveSOCKS5(socksProxy{}))
		direct := "ws://127.0.0.1:" + u.Port() + "/"
		echoOnce(t, direct, &DialOptions{Options: compressed(), Proxy: http.ProxyURL(p.url("socks5", nil))})
		require.Equal(t, byte(1), p.records()[0].addrType)
		require.Equal(t, "127.0.0.1:"+u.Port(), p.records()[0].target)
	})
	t.Run("wrong password", func(t *testing.T) {
		p := startTestProxy(t, hosts, serveSOCKS5(socksProxy{}))
		p.user, p.pass = "bob", "hunter2"
		_, _, err := Dial(testContext(t), wsURL, nil, &DialOptions{Proxy: http.ProxyURL(p.url("socks5", url.UserPassword("bob", "guess")))})
		require.ErrorContains(t, err, "rejected the username and password")
		require.Equal(t, "bob", p.records()[0].user)
	})
	t.Run("credentials required but none given", func(t *testing.T) {
		p := startTestProxy(t, hosts, serveSOCKS5(socksProxy{}))
		p.user, p.pass = "bob", "hunter2"
		_, _, err := Dial(testContext(t), wsURL, nil, &DialOptions{Proxy: http.ProxyURL(p.url("socks5", nil))})
		require.ErrorContains(t, err, "none of our authentication methods")
	})
	t.Run("target refused", func(t *testing.T) {
		p := startTestProxy(t, hosts, serveSOCKS5(socksProxy{}))
		_, _, err := Dial(testContext(t), "ws://gust.test:1/", nil, &DialOptions{Proxy: http.ProxyURL(p.url("socks5", nil))})
		require.ErrorContains(t, err, "connection refused (5)")
	})
}

func TestDialProxyURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proxy string
		want  string
	}{
		{"ftp://proxy.example", `unsupported scheme "ftp"`},
		{"https://proxy.example", `unsupported scheme "https"`},
		{"http://", "no host"},
	} {
		pu, err := url.Parse(tc.proxy)
		require.NoError(t, err)
		_, _, err = Dial(testContext(t), "ws://example.test/", nil, &DialOptions{Proxy: http.ProxyURL(pu)})
		require.ErrorContains(t, err, tc.want)
	}
}

func TestProxyFromEnvironmentNeverProxiesLoopback(t *testing.T) {
	t.Parallel()
	// http.ProxyFromEnvironment reads the environment once per process, so
	// this only checks what holds whatever it read: loopback goes direct.
	addr := startServer(t, newEcho(), nil)
	dialTest(t, "ws://"+addr+"/", &DialOptions{Proxy: http.ProxyFromEnvironment})
}
