package interop

// Interop tests: gust against WebSocket implementations it did not write.
//
//   - Python websockets, Node ws and headless Chromium and Firefox as clients
//     of gust's server, on both the Upgrader (net/http) and the Server (own
//     accept loop) paths, compression enabled; the browsers over wss:// to
//     the Server in netpoll mode too (TLS on gust's event loops);
//   - gust's client (Dial, and Dial over a connection it is handed) against Python websockets
//     and Node ws servers;
//   - gust's client through nginx, HAProxy and Caddy to gust's server (proxy_test.go).
//
// TestMain runs scripts/install-interop, which installs the peers (PyPI,
// npm, apt-get) or keeps them when they already work. A peer that is
// missing afterwards FAILS its tests, loudly, unless GUST_INTEROP_SKIP names
// it (a comma list of python, node, browser, firefox, proxies, or all), which
// skips them, loudly too. GUST_INTEROP_NO_INSTALL=1 only checks what is there.
//
// The matrix (peer × direction × feature) is printed at the end of the run
// and written to reports/interop.md at the repo root.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
	"github.com/gustws/gust/internal/testkit"
)

// repoRoot is the module root, the parent of this package's directory (go
// test runs in the package directory).
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(wd)
}()

// A peer is one real implementation, as installed for this run.
type peer struct {
	key     string // python, node, browser, firefox, proxies: the install-interop and GUST_INTEROP_SKIP name
	name    string // for the matrix
	version string
	err     error // why it cannot be used, when it cannot
}

var peers = map[string]*peer{
	"python":  {key: "python", name: "Python websockets"},
	"node":    {key: "node", name: "Node ws"},
	"browser": {key: "browser", name: "Chromium"},
	"firefox": {key: "firefox", name: "Firefox"},
	"proxies": {key: "proxies", name: "proxies"},
}

var (
	pythonBin  = filepath.Join(repoRoot, ".venv-interop", "bin", "python")
	nodeModule = filepath.Join(repoRoot, ".node", "node_modules")
	installLog string
)

func skipRequested(key string) bool {
	for _, s := range strings.Split(os.Getenv("GUST_INTEROP_SKIP"), ",") {
		s = strings.TrimSpace(s)
		if s == key || s == "all" {
			return true
		}
	}
	return false
}

func loud(lines ...string) string {
	bar := strings.Repeat("#", 80)
	var b strings.Builder
	b.WriteString(bar + "\n")
	for _, l := range lines {
		b.WriteString("#  " + l + "\n")
	}
	b.WriteString(bar + "\n")
	return b.String()
}

func TestMain(m *testing.M) {
	var want []string
	for _, key := range []string{"python", "node", "browser", "firefox", "proxies"} {
		if skipRequested(key) {
			peers[key].err = fmt.Errorf("skipped: GUST_INTEROP_SKIP=%s", os.Getenv("GUST_INTEROP_SKIP"))
			fmt.Fprint(os.Stderr, loud("GUST_INTEROP_SKIP: the "+peers[key].name+" interop tests are SKIPPED, not passed"))
			continue
		}
		want = append(want, key)
	}
	if len(want) > 0 && os.Getenv("GUST_INTEROP_NO_INSTALL") != "1" {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "install-interop"), want...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		cancel()
		installLog = string(out)
		if err != nil {
			fmt.Fprint(os.Stderr, loud("scripts/install-interop "+strings.Join(want, " ")+" FAILED: "+err.Error(),
				"the peers it could not install will FAIL their tests; its output follows"))
			fmt.Fprintln(os.Stderr, installLog)
		} else {
			fmt.Fprintf(os.Stderr, "interop: scripts/install-interop took %v\n", time.Since(start).Round(time.Millisecond))
		}
	}
	for _, key := range want {
		probe(peers[key])
		if p := peers[key]; p.err != nil {
			fmt.Fprint(os.Stderr, loud(p.name+" is NOT AVAILABLE: "+p.err.Error(),
				"its interop tests will FAIL (set GUST_INTEROP_SKIP="+key+" to skip them instead)"))
		} else {
			fmt.Fprintf(os.Stderr, "interop: %s %s\n", p.name, p.version)
		}
	}
	code := leakcheck.Run(m, "github.com/gustws/gust")
	report := matrixReport()
	fmt.Println(report)
	if err := os.MkdirAll(filepath.Join(repoRoot, "reports"), 0o755); err == nil {
		os.WriteFile(filepath.Join(repoRoot, "reports", "interop.md"), []byte(report), 0o644)
	}
	os.Exit(code)
}

// probe finds the version of p, or why it cannot run.
func probe(p *peer) {
	run := func(env []string, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Dir = repoRoot
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err,
				bytes.TrimSpace(append(out, stderr.Bytes()...)))
		}
		return strings.TrimSpace(string(out)), nil
	}
	switch p.key {
	case "python":
		p.version, p.err = run(nil, pythonBin, "-c",
			"import websockets, aiohttp; print(websockets.__version__ + ' (aiohttp ' + aiohttp.__version__ + ')')")
	case "node":
		p.version, p.err = run([]string{"NODE_PATH=" + nodeModule}, "node", "-e",
			`process.stdout.write(require("ws/package.json").version + " (undici " + require("undici/package.json").version + ")")`)
	case "browser":
		var v, d string
		if v, p.err = run(nil, "chromium", "--version"); p.err == nil {
			if d, p.err = run(nil, "chromedriver", "--version"); p.err == nil {
				p.version = strings.Fields(v + " ?")[1] + " (chromedriver " + strings.Fields(d + " ?")[1] + ")"
			}
		}
	case "firefox":
		var v string
		if v, p.err = run(nil, "firefox-esr", "--version"); p.err == nil {
			if _, p.err = exec.LookPath("certutil"); p.err == nil {
				p.version = strings.TrimPrefix(v, "Mozilla Firefox ")
			}
		}
	case "proxies":
		probeProxies(p)
	}
}

// requirePeer fails t when the peer is missing, or skips it when
// GUST_INTEROP_SKIP asked for that, both loudly; either way the matrix gets
// a row that says so for direction.
func requirePeer(t *testing.T, key, direction string) *peer {
	t.Helper()
	p := peers[key]
	if p.err == nil {
		return p
	}
	row := matrixRow{peer: p.name + " (not available)", direction: direction, path: "all"}
	if skipRequested(key) {
		setCell(row, allColumns, "SKIP")
		msg := loud(fmt.Sprintf("SKIPPED (GUST_INTEROP_SKIP): %s — %s interop NOT tested", t.Name(), p.name))
		fmt.Fprint(os.Stderr, msg)
		t.Skip(msg)
	}
	setCell(row, allColumns, "FAIL")
	t.Fatal(loud(fmt.Sprintf("%s interop FAILED: %s is not available: %v", t.Name(), p.name, p.err),
		"scripts/install-interop installs it (PyPI / npm / apt-get); GUST_INTEROP_SKIP="+key+" skips instead"))
	return nil
}

// --- processes ------------------------------------------------------------

// proc is a peer process: its own process group, killed (with all its
// children) at the end of the test or after its timeout; stdout is read as
// lines, stderr kept for failure messages.
type proc struct {
	cmd    *exec.Cmd
	stderr testkit.Buffer
	lines  chan string // stdout, line by line; closed at EOF
	exited chan struct{}
	err    error // Wait's, valid once exited is closed
}

func startProc(t *testing.T, timeout time.Duration, env []string, name string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	ownGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	p := &proc{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatalf("%s: %v", name, err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(p.lines)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		killGroup(cmd) // the whole group: chromium forks many
		<-p.exited
		cancel()
	})
	return p
}

// runToEnd waits for p to exit and returns its stdout lines.
func (p *proc) runToEnd() []string {
	var lines []string
	for l := range p.lines {
		lines = append(lines, l)
	}
	<-p.exited
	return lines
}

// scriptResult is one line a client script prints per case.
type scriptResult struct {
	Case       string `json:"case"`
	OK         bool   `json:"ok"`
	Detail     string `json:"detail"`
	Extensions string `json:"extensions"`
}

func parseResults(lines []string) map[string]scriptResult {
	res := make(map[string]scriptResult)
	for _, l := range lines {
		var r scriptResult
		if json.Unmarshal([]byte(l), &r) == nil && r.Case != "" {
			res[r.Case] = r
		}
	}
	return res
}

// --- the matrix -------------------------------------------------------------

type matrixRow struct {
	peer      string // name and version
	direction string
	path      string
}

var matrix = struct {
	sync.Mutex
	order []matrixRow
	cells map[matrixRow]map[string]string
}{cells: make(map[matrixRow]map[string]string)}

// allColumns as a column name stands for every column of the row.
const allColumns = "*"

// mark records t's outcome, when it ends, in the matrix cell (row, column).
func mark(t *testing.T, row matrixRow, column string) {
	t.Cleanup(func() {
		status := "pass"
		switch {
		case t.Skipped():
			status = "SKIP"
		case t.Failed():
			status = "FAIL"
		}
		setCell(row, column, status)
	})
}

func setCell(row matrixRow, column, status string) {
	matrix.Lock()
	defer matrix.Unlock()
	if _, ok := matrix.cells[row]; !ok {
		matrix.order = append(matrix.order, row)
		matrix.cells[row] = make(map[string]string)
	}
	matrix.cells[row][column] = status
}

func matrixReport() string {
	matrix.Lock()
	defer matrix.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "## gust interop matrix (%s, %s/%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.GOOS, runtime.GOARCH)
	if len(matrix.order) == 0 {
		b.WriteString("(no interop test ran)\n")
		return b.String()
	}
	rank := map[string]int{dirPeerClient: 0, dirBrowser: 1, dirGustClient: 2, dirProxy: 3}
	slices.SortStableFunc(matrix.order, func(a, b matrixRow) int { return rank[a.direction] - rank[b.direction] })
	var peerRows, proxyRows []matrixRow
	for _, r := range matrix.order {
		if r.direction == dirProxy {
			proxyRows = append(proxyRows, r)
		} else {
			peerRows = append(peerRows, r)
		}
	}
	var pass, fail, skip int
	count := func(p, f, s int) { pass, fail, skip = pass+p, fail+f, skip+s }
	if len(peerRows) > 0 {
		count(matrixTable(&b, peerRows, matrixColumns))
	}
	if len(proxyRows) > 0 {
		if len(peerRows) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("### behind a proxy\n\n")
		count(matrixTable(&b, proxyRows, proxyColumns))
	}
	fmt.Fprintf(&b, "\n%d passed, %d failed, %d skipped\n\n", pass, fail, skip)
	if len(peerRows) > 0 {
		b.WriteString(matrixLegend)
	}
	if len(proxyRows) > 0 {
		b.WriteString(proxyLegend)
	}
	return b.String()
}

// matrixTable writes rows as a table of the columns any of them has, and
// counts their cells.
func matrixTable(b *strings.Builder, rows []matrixRow, columns []string) (pass, fail, skip int) {
	var cols []string
	for _, c := range columns {
		for _, r := range rows {
			_, ok := matrix.cells[r][c]
			_, all := matrix.cells[r][allColumns]
			if ok || all {
				cols = append(cols, c)
				break
			}
		}
	}
	b.WriteString("| peer | direction | gust path | " + strings.Join(cols, " | ") + " |\n")
	b.WriteString("|---|---|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			s, ok := matrix.cells[r][c]
			if all, isAll := matrix.cells[r][allColumns]; isAll {
				s, ok = all, true
			}
			switch {
			case !ok:
				s = "n/a"
			case s == "pass":
				pass++
			case s == "FAIL":
				fail++
			default:
				skip++
			}
			cells[i] = s
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", r.peer, r.direction, r.path, strings.Join(cells, " | "))
	}
	return pass, fail, skip
}

// --- peer clients against gust's server ------------------------------------

// The directions of the matrix.
const (
	dirPeerClient = "client → gust server"
	dirBrowser    = "browser → gust server"
	dirGustClient = "gust client → server"
)

const matrixLegend = `Each cell is one subtest; every connection negotiates permessage-deflate (gust's side checks it).
- text, binary: echoed both ways (binary: 1 KiB, ArrayBuffer in the browser); 1 MiB: a binary message echoed.
- fragmented, peer clients: the peer sends one text message in 3 frames (websockets: an iterable; ws:
  {fin: false}); gust must deliver it whole and echo it. Gust client: the peer server sends the 3 frames,
  gust's client delivers one message. Browsers cannot send fragments: n/a.
- deflate: the negotiated Sec-WebSocket-Extensions holds permessage-deflate on both sides, and 256 KiB of
  text goes each way in under 64 KiB on the wire (TCP_INFO byte counts; about 1 KiB is seen).
- close 1000 / 4001 / 4000: the client closes with that code; gust's OnClose sees a *CloseError with it
  (gust client: the peer server reports it) and the client sees it echoed.
- server close 4002: the server closes with 4002 "server-bye" (gust's Close, or the peer server);
  the client sees code and reason (the browser in onclose, clean).
- 200 MB stream (Python only, stream_test.go): websockets sends one 200 MB message in 64 KiB frames to
  a gust server that streams it (Options.StreamThreshold) into a SHA-256; gust's client sends one with
  WriteFrom to a websockets server that reads it with recv_streaming; each side checks count and hash.
  "32 MB stream, deflate": the same with permessage-deflate, 32 MB.
- 16 MiB random, deflate (pooled_test.go): the client sends 16 MiB of random bytes compressed, which
  deflate makes larger than gust's default MaxMessageSize on the wire; gust answers its length and hash.
- WebSocket after a request (pooled_test.go): aiohttp's session GET /healthz then ws_connect, undici's
  fetch then WebSocket, on one connection that HTTPHandler's net/http served first. Rows "Server
  goroutine|netpoll ws|wss" are a gust Server with HTTPHandler.
`

func TestPythonClient(t *testing.T) {
	p := requirePeer(t, "python", dirPeerClient)
	testPeerClient(t, p, featuresNamed("text", "binary", "fragmented", "large", "compression",
		"close-1000", "close-4001", "server-close-4002"),
		nil, pythonBin, filepath.Join(repoRoot, "interop", "testdata", "client.py"))
}

func TestNodeClient(t *testing.T) {
	p := requirePeer(t, "node", dirPeerClient)
	testPeerClient(t, p, featuresNamed("text", "binary", "fragmented", "large", "compression",
		"close-1000", "close-4001", "server-close-4002"),
		[]string{"NODE_PATH=" + nodeModule}, "node", filepath.Join(repoRoot, "interop", "testdata", "client.js"))
}

// testPeerClient runs a client script against gust's server on each path:
// the script does every case, then each feature is a subtest that checks
// the script's verdict and what gust's server saw.
func testPeerClient(t *testing.T, p *peer, features []feature, env []string, name string, args ...string) {
	for _, path := range serverPaths {
		t.Run(path.name, func(t *testing.T) {
			row := matrixRow{peer: p.name + " " + p.version, direction: dirPeerClient, path: path.name}
			h := newEchoServer()
			wsURL, _ := path.start(t, h, nil)
			var cases []string
			for _, f := range features {
				cases = append(cases, f.name)
			}
			pr := startProc(t, 3*time.Minute, env, name, slices.Concat(args, []string{wsURL}, cases)...)
			lines := pr.runToEnd()
			if pr.err != nil {
				t.Errorf("%s exited with %v; stderr:\n%s", filepath.Base(args[0]), pr.err, pr.stderr.String())
			}
			results := parseResults(lines)
			for _, f := range features {
				t.Run(f.name, func(t *testing.T) {
					mark(t, row, f.title)
					checkServerCase(t, h, f, results, pr.stderr.String)
				})
			}
		})
	}
}

func checkServerCase(t *testing.T, h *echoServer, f feature, results map[string]scriptResult, diag func() string) {
	t.Helper()
	r, ok := results[f.name]
	switch {
	case !ok:
		t.Errorf("the peer printed no result for %q; stderr:\n%s", f.name, diag())
	case !r.OK:
		t.Errorf("the peer failed %q: %s (extensions %q)", f.name, r.Detail, r.Extensions)
	default:
		t.Logf("peer: %s (extensions %q)", r.Detail, r.Extensions)
	}
	rec, err := h.wait(f.name, 10*time.Second)
	if err != nil {
		t.Error(err)
		return
	}
	if err := f.check(rec); err != nil {
		t.Errorf("gust's side: %v", err)
	} else {
		t.Logf("gust: compressed=%v, %s, OnClose: %v", rec.compressed, describeAll(rec.received), rec.closeErr)
		if rec.stats {
			t.Logf("gust: %s", wireNote(rec.wireOK, rec.wireIn, rec.wireOut))
		}
	}
}
