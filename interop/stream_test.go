package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust"
)

// One large message each way between Python websockets and gust, streamed
// on both sides (testdata/bigmsg.py): gust's server receives with
// Options.StreamThreshold, gust's client sends with WriteFrom.

var bigMsgScript = filepath.Join(repoRoot, "interop", "testdata", "bigmsg.py")

var streamCases = []struct {
	column   string
	size     int
	compress bool
}{
	{"200 MB stream", 200_000_000, false},
	{"32 MB stream, deflate", 32_000_000, true},
}

// streamTimeout bounds each case: generous for a shared machine and the
// race detector, and still a loud failure rather than a hung suite.
const streamTimeout = 150 * time.Second

// hashingHandler streams each message into a SHA-256 and reports it.
type hashingHandler struct {
	gust.BuiltinEventHandler
	got    chan string // "N HEX", or "error: ..."
	closed chan error
}

func (h *hashingHandler) OnMessage(_ *gust.Conn, m *gust.Message) {
	d := sha256.New()
	n, err := io.Copy(d, m)
	switch {
	case err != nil:
		h.got <- "error: " + err.Error()
	case !m.Streamed():
		h.got <- "error: the message was not streamed"
	default:
		h.got <- fmt.Sprintf("%d %s", n, hex.EncodeToString(d.Sum(nil)))
	}
	m.Close()
}

func (h *hashingHandler) OnClose(_ *gust.Conn, err error) { h.closed <- err }

// scriptLine waits for the next JSON line of p that holds key.
func scriptLine(t *testing.T, p *proc, key string) map[string]any {
	t.Helper()
	deadline := time.After(streamTimeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.exited
				t.Fatalf("bigmsg.py ended (%v) before printing %q; stderr:\n%s", p.err, key, p.stderr.String())
			}
			var v map[string]any
			if json.Unmarshal([]byte(l), &v) == nil && v[key] != nil {
				return v
			}
		case <-deadline:
			t.Fatalf("bigmsg.py printed no %q within %v; stderr:\n%s", key, streamTimeout, p.stderr.String())
		}
	}
}

func TestPythonStreamsToGust(t *testing.T) {
	p := requirePeer(t, "python", dirPeerClient)
	row := matrixRow{peer: p.name + " " + p.version, direction: dirPeerClient, path: "Server"}
	for _, tc := range streamCases {
		t.Run(tc.column, func(t *testing.T) {
			mark(t, row, tc.column)
			h := &hashingHandler{got: make(chan string, 1), closed: make(chan error, 1)}
			s := &gust.Server{}
			s.Upgrader.Handler = h
			s.Upgrader.Options = gust.Options{StreamThreshold: 1 << 20, MaxMessageSize: -1}
			s.Upgrader.Options.Compression.Enabled = tc.compress
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(ln)
			defer s.Close()

			start := time.Now()
			py := startProc(t, streamTimeout, nil, pythonBin, bigMsgScript, "send",
				"ws://"+ln.Addr().String()+"/", strconv.Itoa(tc.size), "65536", map[bool]string{false: "0", true: "1"}[tc.compress])
			sent := scriptLine(t, py, "sent")
			var got string
			select {
			case got = <-h.got:
			case <-time.After(streamTimeout):
				t.Fatalf("gust received no message within %v", streamTimeout)
			}
			want := fmt.Sprintf("%d %s", tc.size, sent["sha256"])
			if got != want {
				t.Fatalf("gust read %q, Python sent %q", got, want)
			}
			t.Logf("%d bytes from Python in %v", tc.size, time.Since(start).Round(time.Millisecond))
		})
	}
}

// genReader yields n deterministic bytes: a 64 KiB random block, rotated
// by 7 bytes more at each read.
type genReader struct {
	n, i  int
	block []byte
}

func newGenReader(n int) *genReader {
	b := make([]byte, 2*65536)
	rand.New(rand.NewSource(1)).Read(b[:65536])
	copy(b[65536:], b[:65536])
	return &genReader{n: n, block: b}
}

func (r *genReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	start := (7 * r.i) % 65536
	k := copy(p[:min(len(p), r.n)], r.block[start:start+65536])
	r.n -= k
	r.i++
	return k, nil
}

func TestGustClientStreamsToPython(t *testing.T) {
	p := requirePeer(t, "python", dirGustClient)
	row := matrixRow{peer: p.name + " " + p.version, direction: dirGustClient, path: "Dial"}
	for _, tc := range streamCases {
		t.Run(tc.column, func(t *testing.T) {
			mark(t, row, tc.column)
			py := startProc(t, streamTimeout, nil, pythonBin, bigMsgScript, "receive",
				map[bool]string{false: "0", true: "1"}[tc.compress])
			port := int(scriptLine(t, py, "listening")["listening"].(float64))

			h := &hashingHandler{got: make(chan string, 1), closed: make(chan error, 1)}
			replies := make(chan string, 1)
			opts := &gust.DialOptions{}
			opts.Options.Compression.Enabled = tc.compress
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, _, err := gust.Dial(ctx, fmt.Sprintf("ws://127.0.0.1:%d/", port), &replyHandler{replies: replies, closed: h.closed}, opts)
			if err != nil {
				t.Fatal(err)
			}
			go c.ReadLoop()
			if c.Compressed() != tc.compress {
				t.Fatalf("compression negotiated: %v", c.Compressed())
			}

			start := time.Now()
			d := sha256.New()
			n, err := c.WriteFrom(gust.OpBinary, io.TeeReader(newGenReader(tc.size), d))
			if err != nil || n != int64(tc.size) {
				t.Fatalf("WriteFrom: %d bytes, %v", n, err)
			}
			want := fmt.Sprintf("%d %s", tc.size, hex.EncodeToString(d.Sum(nil)))
			select {
			case got := <-replies:
				if got != want {
					t.Fatalf("Python read %q, gust sent %q", got, want)
				}
			case err := <-h.closed:
				t.Fatalf("the connection ended before Python answered: %v; stderr:\n%s", err, py.stderr.String())
			case <-time.After(streamTimeout):
				t.Fatalf("Python did not answer within %v; stderr:\n%s", streamTimeout, py.stderr.String())
			}
			t.Logf("%d bytes to Python in %v", tc.size, time.Since(start).Round(time.Millisecond))
			c.Close(gust.StatusNormalClosure, "")
			select {
			case <-h.closed:
			case <-time.After(20 * time.Second):
				t.Fatal("OnClose was not called")
			}
		})
	}
}

// replyHandler passes on the text messages it receives.
type replyHandler struct {
	gust.BuiltinEventHandler
	replies chan string
	closed  chan error
}

func (h *replyHandler) OnMessage(_ *gust.Conn, m *gust.Message) {
	h.replies <- strings.TrimSpace(string(bytes.Clone(m.Data)))
	m.Close()
}

func (h *replyHandler) OnClose(_ *gust.Conn, err error) { h.closed <- err }
