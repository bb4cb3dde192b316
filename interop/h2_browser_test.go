package interop

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WebSockets over HTTP/2 (RFC 8441) with headless Chromium: the test builds
// examples/h2 and runs it as it ships (it re-executes itself with
// GODEBUG=http2xconnect=1, which net/http reads only at start-up, so the
// server cannot run inside this test process), drives Chromium to its page
// over HTTPS (self-signed certificate: acceptInsecureCerts), and the page
// opens h2BrowserSockets WebSockets at once, each echoing a text, a binary
// (ArrayBuffer) and a 1 MiB binary message with permessage-deflate, then
// closing with 1000 or 4000. The example's /stats tells what the server
// saw: every WebSocket an HTTP/2 extended CONNECT, all of them on one TCP
// connection.
//
// Its matrix row: text, binary and 1 MiB as the other rows; deflate means
// permessage-deflate negotiated on every WebSocket on both sides (no wire
// byte count over HTTP/2); close 1000 and close 4000 are the even and odd
// WebSockets' closes, clean and echoed, and seen by the server.

const h2BrowserSockets = 4

// h2Stats is the JSON of the example's /stats (examples/h2/server.go).
type h2Stats struct {
	ExtendedConnect   bool           `json:"extended_connect"`
	TCPAccepted       int64          `json:"tcp_accepted"`
	TCPWithRequests   int            `json:"tcp_with_requests"`
	TCPWithWebSockets int            `json:"tcp_with_websockets"`
	WebSockets        int64          `json:"websockets"`
	WebSocketsHTTP2   int64          `json:"websockets_http2"`
	WebSocketsHTTP1   int64          `json:"websockets_http1"`
	Compressed        int64          `json:"websockets_compressed"`
	WebSocketsOpen    int            `json:"websockets_open"`
	Messages          int64          `json:"messages"`
	Closes            map[string]int `json:"closes"`
}

// h2PageResult is the page's window.gustResult.
type h2PageResult struct {
	Done      bool   `json:"done"`
	OK        bool   `json:"ok"`
	N         int    `json:"n"`
	UserAgent string `json:"userAgent"`
	Results   []struct {
		Socket     int    `json:"socket"`
		Extensions string `json:"extensions"`
		Text       bool   `json:"text"`
		Binary     bool   `json:"binary"`
		Large      bool   `json:"large"`
		Close      *struct {
			Code     int    `json:"code"`
			Reason   string `json:"reason"`
			WasClean bool   `json:"wasClean"`
		} `json:"close"`
		Error string `json:"error"`
		OK    bool   `json:"ok"`
	} `json:"results"`
	Stats *h2Stats `json:"stats"` // as the page fetched it, over its own connection
}

func TestChromiumHTTP2(t *testing.T) {
	p := requirePeer(t, "browser", dirBrowser)
	row := matrixRow{peer: p.name + " " + p.version, direction: dirBrowser, path: "examples/h2 (HTTP/2)"}
	ex := startH2Example(t)
	wd := startWebDriver(t, map[string]any{"acceptInsecureCerts": true})

	pageURL := ex.base + "/?n=" + strconv.Itoa(h2BrowserSockets)
	if err := wd.navigate(pageURL); err != nil {
		t.Fatalf("WebDriver: open %s: %v", pageURL, err)
	}
	var res h2PageResult
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var out struct {
			Value *h2PageResult `json:"value"`
		}
		err := wd.call(http.MethodPost, "/session/"+wd.session+"/execute/sync",
			map[string]any{"script": "return window.gustResult || null;", "args": []any{}}, &out)
		if err != nil {
			t.Fatalf("WebDriver: execute: %v; chromedriver stderr:\n%s", err, wd.proc.stderr.String())
		}
		if out.Value != nil && out.Value.Done {
			res = *out.Value
			break
		}
		if time.Now().After(deadline) {
			src, _ := wd.pageSource()
			t.Fatalf("the page reported nothing within 2 minutes; page:\n%s\nserver log:\n%s", src, ex.proc.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("browser: %s", res.UserAgent)
	if len(res.Results) != h2BrowserSockets {
		t.Fatalf("the page ran %d WebSockets, want %d: %+v", len(res.Results), h2BrowserSockets, res)
	}
	for _, r := range res.Results {
		close := "none"
		if r.Close != nil {
			close = fmt.Sprintf("%d %q clean=%v", r.Close.Code, r.Close.Reason, r.Close.WasClean)
		}
		t.Logf("page: WebSocket %d: extensions %q, text %v, binary %v, 1 MiB %v, close %s, error %q",
			r.Socket, r.Extensions, r.Text, r.Binary, r.Large, close, r.Error)
	}

	// The server's side, once every WebSocket has ended there.
	st := ex.waitClosed(t, 15*time.Second)
	t.Logf("server: %+v", *st)
	if res.Stats != nil {
		t.Logf("server, as the page saw it after the echoes: %d TCP connection(s) accepted, %d carried requests, "+
			"%d carried WebSockets", res.Stats.TCPAccepted, res.Stats.TCPWithRequests, res.Stats.TCPWithWebSockets)
	}

	pageCheck := func(t *testing.T, what string, ok func(i int) bool) {
		for i, r := range res.Results {
			if !ok(i) {
				t.Errorf("WebSocket %d: %s failed (error %q)", r.Socket, what, r.Error)
			}
		}
	}
	t.Run("text", func(t *testing.T) {
		mark(t, row, "text")
		pageCheck(t, "text echo", func(i int) bool { return res.Results[i].Text })
	})
	t.Run("binary", func(t *testing.T) {
		mark(t, row, "binary")
		pageCheck(t, "binary (ArrayBuffer) echo", func(i int) bool { return res.Results[i].Binary })
	})
	t.Run("large", func(t *testing.T) {
		mark(t, row, "1 MiB")
		pageCheck(t, "1 MiB echo", func(i int) bool { return res.Results[i].Large })
		if want := int64(3 * h2BrowserSockets); st.Messages != want {
			t.Errorf("the server echoed %d messages, want %d", st.Messages, want)
		}
	})
	t.Run("compression", func(t *testing.T) {
		mark(t, row, "deflate")
		pageCheck(t, "permessage-deflate in ws.extensions", func(i int) bool {
			return strings.Contains(res.Results[i].Extensions, "permessage-deflate")
		})
		if st.Compressed != h2BrowserSockets {
			t.Errorf("the server negotiated permessage-deflate on %d WebSockets, want %d", st.Compressed, h2BrowserSockets)
		}
	})
	for _, code := range []int{1000, 4000} {
		t.Run("close-"+strconv.Itoa(code), func(t *testing.T) {
			mark(t, row, "close "+strconv.Itoa(code))
			want := 0
			for i, r := range res.Results {
				if i%2 == map[int]int{1000: 0, 4000: 1}[code] {
					want++
					if r.Close == nil || r.Close.Code != code || !r.Close.WasClean {
						t.Errorf("WebSocket %d: onclose %+v, want code %d and wasClean (error %q)", i, r.Close, code, r.Error)
					}
				}
			}
			if got := st.Closes[strconv.Itoa(code)]; got != want {
				t.Errorf("the server saw %d closes with %d, want %d (all: %v)", got, code, want, st.Closes)
			}
		})
	}
	// Not a matrix column: what this test is about.
	t.Run("http2-one-tcp-connection", func(t *testing.T) {
		if !st.ExtendedConnect {
			t.Errorf("the example runs without GODEBUG=http2xconnect=1; its log:\n%s", ex.proc.stderr.String())
		}
		if st.WebSockets != h2BrowserSockets || st.WebSocketsHTTP2 != h2BrowserSockets || st.WebSocketsHTTP1 != 0 {
			t.Errorf("the server saw %d WebSockets, %d over HTTP/2 (extended CONNECT, r.ProtoMajor == 2) and %d over "+
				"HTTP/1.1; want all %d over HTTP/2", st.WebSockets, st.WebSocketsHTTP2, st.WebSocketsHTTP1, h2BrowserSockets)
		}
		if st.TCPWithWebSockets != 1 {
			t.Errorf("the %d WebSockets came over %d TCP connections, want 1", st.WebSockets, st.TCPWithWebSockets)
		}
		// The page, its WebSockets and its fetch of /stats: one connection;
		// the test's own /stats requests add one more. Chromium may open a
		// spare connection that carries no request (seen here: one).
		if browser := int64(st.TCPWithRequests) - ex.ownConns; browser != 1 {
			t.Errorf("Chromium sent its requests over %d TCP connections, want 1 (page, WebSockets and /stats)", browser)
		}
		t.Logf("TCP connections: %d accepted, %d carried Chromium's requests, %d the test's, %d carried the WebSockets",
			st.TCPAccepted, int64(st.TCPWithRequests)-ex.ownConns, ex.ownConns, st.TCPWithWebSockets)
	})
	ex.stop(t)
}

// h2Example is examples/h2 running as a process of its own.
type h2Example struct {
	proc     *proc
	base     string // https://127.0.0.1:PORT
	client   *http.Client
	ownConns int64 // TCP connections the test made to read /stats
}

var h2ServingRE = regexp.MustCompile(`serving (https://[0-9.:\[\]]+)/`)

// startH2Example builds examples/h2 (with -race when this test binary has
// it) and starts it on a free loopback port.
func startH2Example(t *testing.T) *h2Example {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "h2example")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./examples/h2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	ex := &h2Example{proc: startProc(t, 5*time.Minute, nil, bin, "-addr", "127.0.0.1:0")}
	go func() { // the example logs on stderr; stdout stays empty
		for range ex.proc.lines {
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := h2ServingRE.FindStringSubmatch(ex.proc.stderr.String()); m != nil {
			ex.base = m[1]
			break
		}
		select {
		case <-ex.proc.exited:
			t.Fatalf("examples/h2 exited: %v; its log:\n%s", ex.proc.err, ex.proc.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("examples/h2 did not log its address within 30s; its log:\n%s", ex.proc.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	log := ex.proc.stderr.String()
	if !strings.Contains(log, "re-executing") && !strings.Contains(log, "http2xconnect=1") {
		t.Logf("examples/h2 did not re-execute itself (GODEBUG already set?)")
	}
	// One keep-alive connection for every /stats request.
	ex.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the example's self-signed certificate
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
		},
	}
	t.Cleanup(ex.client.CloseIdleConnections)
	t.Logf("examples/h2 on %s; its log so far:\n%s", ex.base, log)
	return ex
}

func (ex *h2Example) stats() (*h2Stats, error) {
	resp, err := ex.client.Get(ex.base + "/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/stats: %s", resp.Status)
	}
	ex.ownConns = 1 // MaxConnsPerHost: the client's one connection
	var st h2Stats
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitClosed polls /stats until no WebSocket is open on the server.
func (ex *h2Example) waitClosed(t *testing.T, d time.Duration) *h2Stats {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, err := ex.stats()
		if err != nil {
			t.Fatalf("examples/h2 %v; its log:\n%s", err, ex.proc.stderr.String())
		}
		if st.WebSockets > 0 && st.WebSocketsOpen == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Errorf("after %v the server still has %d WebSocket(s) open; its log:\n%s",
				d, st.WebSocketsOpen, ex.proc.stderr.String())
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the example with SIGTERM, as a person's Ctrl-C would, and
// checks that it exits cleanly (with -race: without a race report).
func (ex *h2Example) stop(t *testing.T) {
	t.Helper()
	ex.client.CloseIdleConnections()
	if err := ex.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM to examples/h2: %v", err)
		return
	}
	select {
	case <-ex.proc.exited:
		if ex.proc.err != nil {
			t.Errorf("examples/h2 exited with %v; its log:\n%s", ex.proc.err, ex.proc.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Errorf("examples/h2 still running 20s after SIGTERM; its log:\n%s", ex.proc.stderr.String())
	}
	if t.Failed() {
		t.Logf("examples/h2 log:\n%s", ex.proc.stderr.String())
	}
}
