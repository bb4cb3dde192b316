package interop

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gustws/gust"
)

// Real clients on the two paths that failed them (issue 36):
//
//   - a 16 MiB message of random bytes, compressed: exactly the default
//     MaxMessageSize as the handler gets it, a little more on the wire, from
//     Python websockets, aiohttp and Node ws;
//   - a WebSocket on a connection that first carried a plain request to
//     HTTPHandler: aiohttp's session GET then ws_connect, Node's fetch then
//     WebSocket (undici, which Node ships as its global fetch and WebSocket),
//     which reuse the pooled connection;
//
// each against a gust Server in goroutine and netpoll mode, over ws:// and
// over wss:// (ServeTLS).

// pooledCommand is the program and script that run a peer's cases.
func pooledCommand(peer string) (name, script string, env []string) {
	if peer == "node" {
		return "node", filepath.Join(repoRoot, "interop", "testdata", "pooled.js"), []string{"NODE_PATH=" + nodeModule}
	}
	return pythonBin, filepath.Join(repoRoot, "interop", "testdata", "pooled.py"), nil
}

// The rows of the matrix: the library in each script that runs the cases.
var pooledClients = []struct {
	peer, name string   // the peer that installs it, the matrix's name
	cases      []string // the script's case names: big, pooled
}{
	{"python", "Python websockets", []string{"big-websockets"}},
	{"python", "Python aiohttp", []string{"big-aiohttp", "pooled-aiohttp"}},
	{"node", "Node ws", []string{"big-ws"}},
	{"node", "Node undici (fetch, WebSocket)", []string{"pooled-undici"}},
}

// pooledColumn names a case's column in the matrix.
func pooledColumn(c string) string {
	if c[:3] == "big" {
		return "16 MiB random, deflate"
	}
	return "WebSocket after a request"
}

// hashReply answers each message with its length and SHA-256, as text, and
// refuses one that was not compressed.
type hashReply struct {
	gust.BuiltinEventHandler
	netpoll bool
	t       *testing.T
}

func (h hashReply) OnOpen(c *gust.Conn) {
	if c.Netpoll() != h.netpoll {
		h.t.Errorf("Conn.Netpoll() = %v in a Server with Netpoll %v (%T)", c.Netpoll(), h.netpoll, c.NetConn())
	}
}

func (h hashReply) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	sum := sha256.Sum256(m.Data)
	c.WriteString(fmt.Sprintf("%d %s compressed=%v", len(m.Data), hex.EncodeToString(sum[:]), c.Compressed()))
}

func TestRealClientsBigDeflateAndPooledUpgrade(t *testing.T) {
	ca, err := runCA()
	if err != nil {
		t.Fatalf("test certificate: %v", err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, netpoll := range []bool{false, true} {
		for _, secure := range []bool{false, true} {
			mode := map[bool]string{false: "goroutine", true: "netpoll"}[netpoll] + map[bool]string{false: " ws", true: " wss"}[secure]
			t.Run(mode, func(t *testing.T) {
				url := startPooledServer(t, netpoll, secure)
				for _, cl := range pooledClients {
					t.Run(cl.name, func(t *testing.T) {
						p := requirePeer(t, cl.peer, dirPeerClient)
						row := matrixRow{peer: cl.name + " (" + p.version + ")", direction: dirPeerClient, path: "Server " + mode}
						name, script, env := pooledCommand(cl.peer)
						pr := startProc(t, 3*time.Minute, env, name, append([]string{script, url, caFile}, cl.cases...)...)
						results := parseResults(pr.runToEnd())
						for _, c := range cl.cases {
							t.Run(c, func(t *testing.T) {
								mark(t, row, pooledColumn(c))
								r, ok := results[c]
								switch {
								case !ok:
									t.Errorf("the client printed no result for %q (exit %v); stderr:\n%s", c, pr.err, pr.stderr.String())
								case !r.OK:
									t.Errorf("%s: %s (extensions %q)", c, r.Detail, r.Extensions)
								default:
									t.Logf("%s: %s (extensions %q)", c, r.Detail, r.Extensions)
								}
							})
						}
					})
				}
			})
		}
	}
}

// startPooledServer serves hashReply on a Server with HTTPHandler (GET
// /healthz answers "ok"), compression on and the default MaxMessageSize,
// and returns its ws:// or wss:// URL.
func startPooledServer(t *testing.T, netpoll, secure bool) string {
	opts := serverOptions()
	opts.Netpoll = netpoll
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "HTTPHandler got "+r.Method+" "+r.URL.Path+" (Upgrade: "+r.Header.Get("Upgrade")+")", http.StatusTeapot)
	})
	s := &gust.Server{
		Upgrader:    gust.Upgrader{Handler: hashReply{netpoll: netpoll, t: t}, Options: opts, CheckOrigin: loopbackOrigin},
		HTTPHandler: mux,
	}
	ln := listenLoopback(t)
	served := make(chan error, 1)
	scheme := "ws"
	if secure {
		ca, _ := runCA()
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{ca.leaf}}
		scheme = "wss"
		go func() { served <- s.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- s.Serve(ln) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("gust Server.Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, gust.ErrServerClosed) {
			t.Errorf("gust Server.Serve returned %v, want ErrServerClosed", err)
		}
	})
	return scheme + "://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/ws"
}
