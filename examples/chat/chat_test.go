package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

// TestChatInChromium runs the chat server in-process and two headless
// Chromium pages that chat through it, driven over chromedriver's W3C
// WebDriver HTTP API: join, notices, messages both ways, the member list,
// the page's reconnect after the server closes every connection, and a
// leave notice. It saves a screenshot of each page and logs their paths
// (GUST_TEST_OUTPUT names the folder; default: a gust-chat-test folder in
// the temporary directory).
//
// Chromium and chromedriver come from Debian (scripts/install-chromium, run
// here when either is missing). GUST_SKIP_BROWSER=1 skips the test, loudly.
func TestChatInChromium(t *testing.T) {
	chromium, driver := browser(t, "the chat page")

	ch := newLocalChat(1000, false)
	defer ch.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := ch.server(10 * time.Second)
	go srv.Serve(ln)
	defer func() {
		// 10 s: net/http's Shutdown takes up to 5 s for a connection
		// Chromium opened ahead of need and never used.
		require.NoError(t, ch.shutdown(srv, 10*time.Second))
	}()
	base := "http://" + ln.Addr().String() + "/"

	wd := startDriver(t, driver)
	alice := wd.newSession(t, chromium)
	bob := wd.newSession(t, chromium)

	alice.open(t, base)
	alice.join(t, "alice", "lobby")
	bob.open(t, base)
	bob.join(t, "bob", "lobby")

	alice.waitText(t, "#log", "bob joined")
	alice.waitText(t, "#members", "alice\nbob")
	bob.waitText(t, "#members", "alice\nbob")

	alice.say(t, "hello bob")
	bob.waitText(t, "#log", "alice: hello bob")
	bob.say(t, "hi alice <b>not bold</b>")
	alice.waitText(t, "#log", "bob: hi alice <b>not bold</b>")
	require.Equal(t, 0, alice.count(t, "#log b"), "a message was rendered as HTML")

	// A room of one's own: carol in another room sees none of it.
	carol := wd.newSession(t, chromium)
	carol.open(t, base)
	carol.join(t, "carol", "kitchen")
	carol.waitText(t, "#members", "carol")
	alice.say(t, "lobby only")
	bob.waitText(t, "#log", "lobby only")

	// The server closes every connection: the pages reconnect by themselves.
	pages := []*session{alice, bob, carol}
	var opens []string
	for _, p := range pages {
		opens = append(opens, p.opens(t))
	}
	ch.closeAll(4000, "test restart", "lobby", "kitchen")
	for i, p := range pages {
		p.waitFor(t, "a new connection", func() bool { return p.opens(t) != opens[i] })
		p.waitState(t, "connected")
	}
	bob.waitText(t, "#members", "alice\nbob")
	bob.say(t, "back again")
	alice.waitText(t, "#log", "bob: back again")
	// Each page reconnected with the number of the last message it had:
	// nothing came twice.
	require.Equal(t, 1, strings.Count(bob.text(t, "#log"), "lobby only"), bob.text(t, "#log"))
	require.Equal(t, 1, strings.Count(alice.text(t, "#log"), "hello bob"), alice.text(t, "#log"))
	require.NotContains(t, carol.text(t, "#log"), "lobby only")
	require.NotContains(t, carol.text(t, "#log"), "back again")

	// Screenshots while both pages show the conversation.
	dir := os.Getenv("GUST_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "gust-chat-test")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, p := range map[string]*session{"alice": alice, "bob": bob} {
		path := filepath.Join(dir, "chat-"+name+".png")
		require.NoError(t, os.WriteFile(path, p.screenshot(t), 0o644))
		t.Logf("screenshot of %s's page: %s", name, path)
	}

	// Bob leaves: alice sees it.
	bob.quit(t)
	alice.waitText(t, "#log", "bob left")
	alice.waitText(t, "#members", "alice")
	require.NotContains(t, alice.text(t, "#members"), "bob")
	t.Logf("alice's page:\n%s", alice.text(t, "#log"))
}

// browser skips the test, loudly, when GUST_SKIP_BROWSER=1, saying what is
// left untested; else it returns Chromium and chromedriver (findChromium).
func browser(t *testing.T, what string) (chromium, driver string) {
	t.Helper()
	if os.Getenv("GUST_SKIP_BROWSER") == "1" {
		msg := fmt.Sprintf("SKIPPING A BROWSER TEST: GUST_SKIP_BROWSER=1 (%s is NOT tested in Chromium)", what)
		fmt.Fprintf(os.Stderr, "\n*** %s ***\n\n", msg)
		t.Skip(msg)
	}
	return findChromium(t)
}

// findChromium returns the chromium and chromedriver binaries, installing
// them with scripts/install-chromium when either is missing.
func findChromium(t *testing.T) (chromium, driver string) {
	t.Helper()
	look := func() (string, string, bool) {
		c, err1 := exec.LookPath("chromium")
		d, err2 := exec.LookPath("chromedriver")
		return c, d, err1 == nil && err2 == nil
	}
	if c, d, ok := look(); ok {
		return c, d
	}
	t.Log("chromium or chromedriver missing: running scripts/install-chromium")
	cmd := exec.Command("../../scripts/install-chromium")
	out, err := cmd.CombinedOutput()
	c, d, ok := look()
	if err != nil || !ok {
		t.Fatalf("\n*** THE BROWSER CHAT TEST CANNOT RUN: Chromium could not be installed (%v).\n"+
			"*** scripts/install-chromium said:\n%s\n*** Install Debian's chromium and chromium-driver, "+
			"or set GUST_SKIP_BROWSER=1 to skip this test. ***", err, out)
	}
	return c, d
}

// webDriver is a chromedriver process and the base URL of its HTTP API.
type webDriver struct {
	url string
}

func startDriver(t *testing.T, path string) *webDriver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(path, fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("chromedriver output:\n%s", logs.String())
		}
	})
	wd := &webDriver{url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := wd.call(http.MethodGet, "/status", nil, &st); err == nil && st.Ready {
			return wd
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not become ready: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call sends a WebDriver command and decodes the "value" of the answer.
func (wd *webDriver) call(method, path string, body, value any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, wd.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	client := http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, out.Value)
	}
	if value != nil {
		return json.Unmarshal(out.Value, value)
	}
	return nil
}

// session is one browser with one page.
type session struct {
	wd *webDriver
	id string
}

func (wd *webDriver) newSession(t *testing.T, chromium string) *session {
	t.Helper()
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": chromium,
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
				"--disable-dev-shm-usage", "--window-size=900,600"},
		},
	}}}
	var res struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, wd.call(http.MethodPost, "/session", caps, &res))
	s := &session{wd: wd, id: res.SessionID}
	t.Cleanup(func() { s.wd.call(http.MethodDelete, "/session/"+s.id, nil, nil) })
	return s
}

func (s *session) do(t *testing.T, method, path string, body, value any) {
	t.Helper()
	require.NoError(t, s.wd.call(method, "/session/"+s.id+path, body, value))
}

func (s *session) open(t *testing.T, url string) {
	t.Helper()
	s.do(t, http.MethodPost, "/url", map[string]string{"url": url}, nil)
}

// element finds the element matching a CSS selector.
func (s *session) element(t *testing.T, css string) string {
	t.Helper()
	var el map[string]string
	s.do(t, http.MethodPost, "/element", map[string]string{"using": "css selector", "value": css}, &el)
	for _, id := range el { // the key is the W3C element identifier
		return id
	}
	t.Fatalf("no element %s", css)
	return ""
}

// typeInto clears an input and types text into it, as a user would.
func (s *session) typeInto(t *testing.T, css, text string) {
	t.Helper()
	id := s.element(t, css)
	s.do(t, http.MethodPost, "/element/"+id+"/clear", map[string]any{}, nil)
	s.do(t, http.MethodPost, "/element/"+id+"/value", map[string]string{"text": text}, nil)
}

func (s *session) click(t *testing.T, css string) {
	t.Helper()
	s.do(t, http.MethodPost, "/element/"+s.element(t, css)+"/click", map[string]any{}, nil)
}

func (s *session) join(t *testing.T, name, room string) {
	t.Helper()
	s.typeInto(t, "#name", name)
	s.typeInto(t, "#room", room)
	s.click(t, "#join")
	s.waitState(t, "connected")
}

func (s *session) say(t *testing.T, text string) {
	t.Helper()
	s.typeInto(t, "#text", text+"\uE007") // Enter submits the form
}

func (s *session) script(t *testing.T, js string, args ...any) any {
	t.Helper()
	if args == nil {
		args = []any{}
	}
	var v any
	s.do(t, http.MethodPost, "/execute/sync", map[string]any{"script": js, "args": args}, &v)
	return v
}

// text is what the page shows in the element (its innerText).
func (s *session) text(t *testing.T, css string) string {
	t.Helper()
	v, _ := s.script(t, "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css).(string)
	return v
}

func (s *session) count(t *testing.T, css string) int {
	t.Helper()
	v, _ := s.script(t, "return document.querySelectorAll(arguments[0]).length;", css).(float64)
	return int(v)
}

func (s *session) waitText(t *testing.T, css, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := s.text(t, css)
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %q; it shows:\n%s", css, want, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *session) waitState(t *testing.T, state string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, _ := s.script(t, "return document.getElementById('status').dataset.state;").(string)
		if v == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page's status is %q, never %q (%s)", v, state, s.text(t, "#status"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// opens is how many connections the page has made.
func (s *session) opens(t *testing.T) string {
	t.Helper()
	v, _ := s.script(t, "return document.getElementById('status').dataset.opens || '0';").(string)
	return v
}

func (s *session) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *session) screenshot(t *testing.T) []byte {
	t.Helper()
	var b64 string
	s.do(t, http.MethodGet, "/screenshot", nil, &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	return png
}

// quit closes the browser, as a user closing the tab.
func (s *session) quit(t *testing.T) {
	t.Helper()
	s.do(t, http.MethodDelete, "", nil, nil)
}

// closeAll closes every connection of the rooms with code and reason, for
// the test of the page's reconnect: the pages reconnect by themselves.
func (ch *chat) closeAll(code gust.StatusCode, reason string, rooms ...string) {
	var conns []*gust.Conn
	for _, room := range rooms {
		conns = ch.hub.AppendSubscribers(conns, room)
	}
	for _, c := range conns {
		c.Close(code, reason)
	}
}

// Names and rooms are printable text, bounded: what a client sends cannot
// carry control or format characters (NUL, U+202E) into other pages.
func TestCleanNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"  bob  ", "bob"},
		{"a\x00b", "ab"},
		{"evil\u202etxt.exe", "eviltxt.exe"},
		{"two\nlines\tand tabs", "two lines and tabs"},
		{"\xff\xfe", "lobby"},
		{"", "lobby"},
		{strings.Repeat("é", 40), strings.Repeat("é", 32)},
	} {
		require.Equal(t, tc.want, clean(tc.in, maxRoom, "lobby"), "%q", tc.in)
	}
	require.Len(t, clean(strings.Repeat("x", 100), maxName, ""), maxName)
}
