package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Headless Chromium against gust's server: a page served by the test on
// loopback opens `new WebSocket(...)` for each case and POSTs its results
// back. Chromium is driven by chromedriver's W3C WebDriver API, which is
// plain HTTP.

func TestChromium(t *testing.T) {
	p := requirePeer(t, "browser", dirBrowser)
	wd := startWebDriver(t, map[string]any{"acceptInsecureCerts": true}) // the wss path's test CA
	browserCases(t, p, func(t *testing.T, pageURL string) (diag func() string) {
		if err := wd.navigate(pageURL); err != nil {
			t.Fatalf("WebDriver: open %s: %v", pageURL, err)
		}
		return func() string {
			src, _ := wd.pageSource()
			return "page:\n" + src + "\nchromedriver stderr:\n" + wd.proc.stderr.String()
		}
	})
}

// browserCases runs the page's cases in a browser over every server path,
// wss:// in netpoll mode included: open has the browser load pageURL, and
// returns what to show when the page fails.
func browserCases(t *testing.T, p *peer, open func(t *testing.T, pageURL string) (diag func() string)) {
	features := featuresNamed("text", "binary", "large", "compression", "close-1000", "close-4000",
		"server-close-4002")
	page, err := os.ReadFile(filepath.Join(repoRoot, "interop", "testdata", "page.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(serverPaths, tlsNetpollPath) {
		t.Run(path.name, func(t *testing.T) {
			row := matrixRow{peer: p.name + " " + p.version, direction: dirBrowser, path: path.name}
			h := newEchoServer()
			reports := make(chan browserReport, 1)
			mux := http.NewServeMux()
			mux.HandleFunc("GET /page.html", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.Write(page)
			})
			mux.HandleFunc("POST /result", func(w http.ResponseWriter, r *http.Request) {
				var rep browserReport
				if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&rep); err != nil {
					rep.Error = "bad report: " + err.Error()
				}
				select {
				case reports <- rep:
				default:
				}
				w.WriteHeader(http.StatusNoContent)
			})
			wsURL, httpURL := path.start(t, h, mux)
			diag := open(t, httpURL+"/page.html?ws="+url.QueryEscape(wsURL))
			var rep browserReport
			select {
			case rep = <-reports:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the page reported nothing within 2 minutes; %s", diag())
			}
			if rep.Error != "" {
				t.Errorf("the page failed: %s", rep.Error)
			}
			t.Logf("browser: %s", rep.UserAgent)
			results := make(map[string]scriptResult)
			for _, r := range rep.Results {
				results[r.Case] = r
			}
			for _, f := range features {
				t.Run(f.name, func(t *testing.T) {
					mark(t, row, f.title)
					checkServerCase(t, h, f, results, diag)
				})
			}
		})
	}
}

type browserReport struct {
	UserAgent string         `json:"userAgent"`
	Error     string         `json:"error"`
	Results   []scriptResult `json:"results"`
}

// webDriver is a chromedriver process with one Chromium session.
type webDriver struct {
	proc    *proc
	base    string // http://127.0.0.1:PORT
	session string
	client  *http.Client
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln := listenLoopback(t)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// startWebDriver starts chromedriver and a headless Chromium session; extra
// capabilities (such as acceptInsecureCerts) are added to alwaysMatch.
func startWebDriver(t *testing.T, extra map[string]any) *webDriver {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	// The profile directory outlives the processes: made first, removed last.
	profile := t.TempDir()
	port := freeLoopbackPort(t)
	wd := &webDriver{
		base:   "http://127.0.0.1:" + strconv.Itoa(port),
		client: &http.Client{Timeout: 90 * time.Second},
	}
	wd.proc = startProc(t, 5*time.Minute, nil, "chromedriver", "--port="+strconv.Itoa(port),
		"--allowed-ips=127.0.0.1", "--log-level=WARNING")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var status struct {
			Value struct {
				Ready bool `json:"ready"`
			} `json:"value"`
		}
		if err := wd.call(http.MethodGet, "/status", nil, &status); err == nil && status.Value.Ready {
			break
		}
		select {
		case <-wd.proc.exited:
			t.Fatalf("chromedriver exited: %v; stderr:\n%s", wd.proc.err, wd.proc.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver not ready on %s after 30s; stderr:\n%s", wd.base, wd.proc.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	match := map[string]any{
		"goog:chromeOptions": map[string]any{
			"binary": chromium,
			"args": []string{
				"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
				"--disable-quic", "--no-first-run", "--disable-background-networking",
				"--disable-component-update", "--disable-sync", "--disable-extensions",
				"--user-data-dir=" + profile,
			},
		},
	}
	for k, v := range extra {
		match[k] = v
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": match}}
	var created struct {
		Value struct {
			SessionID    string         `json:"sessionId"`
			Capabilities map[string]any `json:"capabilities"`
		} `json:"value"`
	}
	if err := wd.call(http.MethodPost, "/session", caps, &created); err != nil {
		t.Fatalf("WebDriver: new session: %v; chromedriver stderr:\n%s", err, wd.proc.stderr.String())
	}
	wd.session = created.Value.SessionID
	// Registered after startProc's cleanup, so it runs first: quit Chromium
	// politely, then the process group is killed.
	t.Cleanup(func() {
		if err := wd.call(http.MethodDelete, "/session/"+wd.session, nil, nil); err != nil {
			t.Logf("WebDriver: delete session: %v", err)
		}
	})
	return wd
}

func (wd *webDriver) navigate(u string) error {
	return wd.call(http.MethodPost, "/session/"+wd.session+"/url", map[string]string{"url": u}, nil)
}

func (wd *webDriver) pageSource() (string, error) {
	var src struct {
		Value string `json:"value"`
	}
	err := wd.call(http.MethodGet, "/session/"+wd.session+"/source", nil, &src)
	return src.Value, err
}

// call sends one WebDriver command and decodes the answer into out.
func (wd *webDriver) call(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, wd.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := wd.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
