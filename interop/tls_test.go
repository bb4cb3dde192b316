package interop

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/internal/selfsigned"
)

// Browsers over wss:// to gust's Server in netpoll mode, where crypto/tls
// runs on gust's event loops (Server.ServeTLS): the page comes over plain
// HTTP from the test's own server, and opens its WebSockets to wss://.

// testCA is a certificate authority made for the run, and a certificate it
// signed for 127.0.0.1: browsers trust the authority (Chromium through
// acceptInsecureCerts, Firefox through its profile's certificate database)
// and refuse an authority's certificate presented as a server's.
type testCA struct {
	caPEM []byte
	leaf  tls.Certificate
}

var runCA = sync.OnceValues(func() (*testCA, error) {
	ca, err := selfsigned.Cert(nil, "gust interop test CA")
	if err != nil {
		return nil, err
	}
	leaf, err := selfsigned.Cert(&ca, "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	return &testCA{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]}), leaf: leaf}, nil
})

// tlsNetpollPath is gust's Server over TLS in netpoll mode, for the
// browsers: every connection must be served by an event loop.
var tlsNetpollPath = serverPath{name: "Server wss netpoll", start: startServerTLSNetpoll}

// onLoops checks that every connection it opens is served by an event
// loop (Conn.Netpoll), and is the echo server otherwise.
type onLoops struct {
	*echoServer
	t *testing.T
}

func (h onLoops) OnOpen(c *gust.Conn) {
	if !c.Netpoll() {
		h.t.Errorf("a wss connection is not on an event loop (Conn.Netpoll false): %T", c.NetConn())
	}
	h.echoServer.OnOpen(c)
}

// startServerTLSNetpoll serves h with a Server's ServeTLS in netpoll mode,
// and mux, if any, over plain HTTP on a separate loopback server.
func startServerTLSNetpoll(t *testing.T, h *echoServer, mux *http.ServeMux) (string, string) {
	ca, err := runCA()
	if err != nil {
		t.Fatalf("test certificate: %v", err)
	}
	opts := serverOptions()
	opts.Netpoll = true
	s := &gust.Server{
		Upgrader:  gust.Upgrader{Handler: onLoops{h, t}, Options: opts, CheckOrigin: loopbackOrigin},
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.leaf}},
	}
	return runServer(t, s, h, mux)
}

// Headless Firefox (Debian's firefox-esr) against gust's server, the same
// page and cases as Chromium's. Debian has no geckodriver: each page opens
// in a Firefox of its own, started with the page's URL, which reports to
// the test; its profile trusts the run's test CA (certutil), for wss://.
func TestFirefox(t *testing.T) {
	p := requirePeer(t, "firefox", dirBrowser)
	ca, err := runCA()
	if err != nil {
		t.Fatalf("test certificate: %v", err)
	}
	browserCases(t, p, func(t *testing.T, pageURL string) func() string {
		profile := firefoxProfile(t, ca)
		ff := startProc(t, 3*time.Minute, []string{"MOZ_CRASHREPORTER_DISABLE=1"},
			"firefox-esr", "--headless", "--no-remote", "--profile", profile, pageURL)
		return func() string { return "firefox stderr:\n" + ff.stderr.String() }
	})
}

// firefoxProfile makes a profile that trusts ca and keeps Firefox from
// what a test does not want: first-run pages, updates, telemetry, the
// network beyond loopback.
func firefoxProfile(t *testing.T, ca *testCA) string {
	t.Helper()
	dir := t.TempDir()
	prefs := []string{
		`user_pref("browser.shell.checkDefaultBrowser", false);`,
		`user_pref("browser.startup.homepage_override.mstone", "ignore");`,
		`user_pref("browser.aboutwelcome.enabled", false);`,
		`user_pref("datareporting.policy.dataSubmissionEnabled", false);`,
		`user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);`,
		`user_pref("app.update.auto", false);`,
		`user_pref("network.captive-portal-service.enabled", false);`,
		`user_pref("network.connectivity-service.enabled", false);`,
		`user_pref("browser.safebrowsing.malware.enabled", false);`,
		`user_pref("browser.safebrowsing.phishing.enabled", false);`,
		`user_pref("extensions.update.enabled", false);`,
	}
	if err := os.WriteFile(filepath.Join(dir, "user.js"), []byte(strings.Join(prefs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "gust-test-ca.pem")
	if err := os.WriteFile(caFile, ca.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-N", "-d", "sql:" + dir, "--empty-password"},
		{"-A", "-d", "sql:" + dir, "-n", "gust interop test CA", "-t", "C,,", "-i", caFile},
	} {
		if out, err := exec.Command("certutil", args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}
