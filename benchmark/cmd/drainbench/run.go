package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

type runConfig struct {
	conns, perProxy int
	window          time.Duration
	stops           string
	runs            int
	basePort        int
	haproxy         string
	netpoll         bool
}

// result is one measurement, printed as a JSON line.
type result struct {
	Stop     string       `json:"stop"` // shutdown or drain
	WindowS  float64      `json:"window_s"`
	Conns    int          `json:"conns"`
	Proxies  int          `json:"proxies"`
	Netpoll  bool         `json:"netpoll"`
	Peak     int64        `json:"peak_per_100ms"` // handshakes the second instance answered in its busiest 100 ms
	PeakAtMS int64        `json:"peak_at_ms"`     // when that bucket began, from the stop
	P90      int64        `json:"p90_per_100ms"`  // the 90th percentile of the non-empty buckets
	AllMS    int64        `json:"all_back_ms"`    // when the second instance had every connection, from the stop
	Back     int64        `json:"back"`           // connections open on the second instance at the end
	Handshks int64        `json:"b_handshakes"`   // handshakes it answered in all
	Clients  clientCounts `json:"clients"`
	Error    string       `json:"error,omitempty"`
}

// orchestrate runs each stop of cfg.stops, cfg.runs times in turn, and
// prints a JSON line per measurement on stdout.
func orchestrate(cfg runConfig) error {
	if cfg.conns <= 0 || cfg.perProxy <= 0 {
		return errors.New("run: -conns and -per-proxy must be positive")
	}
	if _, err := exec.LookPath(cfg.haproxy); err != nil {
		return fmt.Errorf("run: %s not found (Debian: apt-get install haproxy): %w", cfg.haproxy, err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	stops := strings.Split(cfg.stops, ",")
	m := 0
	for r := range cfg.runs {
		for _, stop := range stops {
			if stop != "shutdown" && stop != "drain" {
				return fmt.Errorf("run: unknown stop %q", stop)
			}
			logf("round %d: %s, %d connections", r+1, stop, cfg.conns)
			res := measure(self, cfg, stop, cfg.basePort+60*m)
			m++
			line, _ := json.Marshal(res)
			fmt.Println(string(line))
			if res.Error != "" {
				logf("%s: %s", stop, res.Error)
			}
		}
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "drainbench: "+format+"\n", args...)
}

// procs are the processes of one measurement, each with its log file.
type procs struct {
	dir  string
	list []*exec.Cmd
}

// start starts name with args, its stderr (and stdout, unless out is
// given) to a log file in the measurement's directory.
func (p *procs) start(name, logName string, out io.Writer, args ...string) (*exec.Cmd, error) {
	f, err := os.Create(filepath.Join(p.dir, logName))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stderr = f
	cmd.Stdout = f
	if out != nil {
		cmd.Stdout = out
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p.list = append(p.list, cmd)
	go func() {
		cmd.Wait()
		f.Close()
	}()
	return cmd, nil
}

// stop ends cmd: SIGTERM, then SIGKILL after grace.
func stopProc(cmd *exec.Cmd, grace time.Duration) {
	if cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if cmd.Process.Signal(syscall.Signal(0)) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
}

// tail returns the last lines of a log file of the measurement.
func (p *procs) tail(logName string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, logName))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

var httpc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// serverStats asks a server's /stats.
func serverStats(addr string) (stats, error) {
	var st stats
	resp, err := httpc.Get("http://" + addr + "/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitFor polls cond every 100 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// haproxyConfig is the configuration of proxy i: a frontend on port
// front, the two instances as the backend's servers (the least loaded
// chosen, the health route checked every 100 ms, one answer to change a
// server's state), connections to them from 127.0.0.<10+i>.
func haproxyConfig(i, front, a, b, maxconn int) string {
	src := fmt.Sprintf("127.0.0.%d", 10+i)
	return fmt.Sprintf(`global
	maxconn %d
	nbthread 1

defaults
	mode http
	timeout connect 5s
	timeout client 120s
	timeout server 120s
	timeout tunnel 1h
	timeout http-request 10s
	timeout check 2s
	option redispatch
	retries 3

frontend front
	bind 127.0.0.1:%d
	default_backend gust

backend gust
	balance leastconn
	option httpchk GET /healthz
	http-check expect status 200
	default-server inter 100ms fall 1 rise 1 source %s
	server a 127.0.0.1:%d check
	server b 127.0.0.1:%d check
`, maxconn, front, src, a, b)
}

// measure runs one stop: the clients on the first instance behind the
// proxies, the second started, the first stopped, until every client is
// back on the second.
func measure(self string, cfg runConfig, stop string, port int) (res result) {
	k := (cfg.conns + cfg.perProxy - 1) / cfg.perProxy
	res = result{Stop: stop, Conns: cfg.conns, Proxies: k, Netpoll: cfg.netpoll}
	if stop == "drain" {
		res.WindowS = cfg.window.Seconds()
	}
	dir, err := os.MkdirTemp("", "drainbench-")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	p := &procs{dir: dir}
	var clients []*exec.Cmd
	var clientOut []*bytes.Buffer
	defer func() {
		for _, c := range p.list {
			stopProc(c, 5*time.Second)
		}
		if res.Error == "" {
			os.RemoveAll(dir)
		} else {
			res.Error += " (logs in " + dir + ")"
		}
	}()
	fail := func(format string, args ...any) result {
		res.Error = fmt.Sprintf(format, args...)
		return res
	}
	addrA := fmt.Sprintf("127.0.0.1:%d", port+1)
	addrB := fmt.Sprintf("127.0.0.1:%d", port+2)
	serverArgs := func(addr string) []string {
		args := []string{"-mode", "server", "-addr", addr}
		if cfg.netpoll {
			args = append(args, "-netpoll")
		}
		return args
	}

	// The first instance, the proxies, the clients.
	a, err := p.start(self, "a.log", nil, serverArgs(addrA)...)
	if err != nil {
		return fail("starting the first instance: %v", err)
	}
	if !waitFor(10*time.Second, func() bool { _, err := serverStats(addrA); return err == nil }) {
		return fail("the first instance did not start: %s", p.tail("a.log"))
	}
	maxconn := min(cfg.perProxy+500, 9500) // two descriptors a connection, under a limit of 20,000
	for i := range k {
		front := port + 10 + i
		cfgFile := filepath.Join(dir, fmt.Sprintf("haproxy-%d.cfg", i))
		if err := os.WriteFile(cfgFile, []byte(haproxyConfig(i, front, port+1, port+2, maxconn)), 0o644); err != nil {
			return fail("%v", err)
		}
		logName := fmt.Sprintf("haproxy-%d.log", i)
		if _, err := p.start(cfg.haproxy, logName, nil, "-db", "-f", cfgFile); err != nil {
			return fail("starting haproxy: %v", err)
		}
		up := waitFor(10*time.Second, func() bool {
			nc, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", front), time.Second)
			if err == nil {
				nc.Close()
			}
			return err == nil
		})
		if !up {
			return fail("haproxy %d did not start: %s", i, p.tail(logName))
		}
	}
	setup := time.Minute + time.Duration(cfg.conns)*5*time.Millisecond
	hold := setup + cfg.window + 3*time.Minute // the clients exit by themselves after this
	for i := range k {
		n := min(cfg.perProxy, cfg.conns-i*cfg.perProxy)
		out := &bytes.Buffer{}
		url := fmt.Sprintf("ws://127.0.0.1:%d/ws", port+10+i)
		c, err := p.start(self, fmt.Sprintf("clients-%d.log", i), out,
			"-mode", "clients", "-url", url, "-conns", fmt.Sprint(n), "-hold", hold.String())
		if err != nil {
			return fail("starting clients: %v", err)
		}
		clients, clientOut = append(clients, c), append(clientOut, out)
	}
	var open int64
	connected := waitFor(setup, func() bool {
		st, err := serverStats(addrA)
		if err == nil && st.Open/1000 != open/1000 {
			logf("%d connections on the first instance", st.Open)
		}
		open = st.Open
		return err == nil && st.Open >= int64(cfg.conns)
	})
	if !connected {
		return fail("%d of %d connections on the first instance after %v: %s", open, cfg.conns, setup, p.tail("clients-0.log"))
	}

	// The second instance, up on every proxy.
	if _, err := p.start(self, "b.log", nil, serverArgs(addrB)...); err != nil {
		return fail("starting the second instance: %v", err)
	}
	checked := waitFor(30*time.Second, func() bool {
		st, err := serverStats(addrB)
		return err == nil && st.Healthz >= int64(3*k)
	})
	if !checked {
		return fail("the proxies do not check the second instance: %s", p.tail("b.log"))
	}
	time.Sleep(time.Second)

	// The stop, and the clients coming back.
	t0 := time.Now()
	q := "how=" + stop
	if stop == "drain" {
		q += "&window=" + cfg.window.String()
	}
	resp, err := httpc.Post("http://"+addrA+"/stop?"+q, "", nil)
	if err != nil {
		return fail("stopping the first instance: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fail("stopping the first instance: %s", resp.Status)
	}
	logf("%s sent", stop)
	var st stats
	back := waitFor(cfg.window+time.Minute, func() bool {
		st, err = serverStats(addrB)
		return err == nil && st.Open >= int64(cfg.conns)
	})
	st, err = serverStats(addrB)
	if err != nil {
		return fail("reading the second instance's counts: %v", err)
	}
	res.Back = st.Open
	analyse(&res, st, t0)
	if !back {
		res.Error = fmt.Sprintf("%d of %d connections back on the second instance after %v", st.Open, cfg.conns, cfg.window+time.Minute)
	}
	logf("%s: peak %d handshakes in 100 ms on the second instance, %d ms after the stop; all back after %d ms",
		stop, res.Peak, res.PeakAtMS, res.AllMS)

	// Wait for the first instance to end (its stop returned), then stop
	// the clients and read their counts.
	if !waitFor(cfg.window+time.Minute, func() bool { return a.Process.Signal(syscall.Signal(0)) != nil }) {
		logf("the first instance is still running: %s", p.tail("a.log"))
	}
	for _, c := range clients {
		stopProc(c, 10*time.Second)
	}
	waitFor(5*time.Second, func() bool {
		for _, c := range clients {
			if c.Process.Signal(syscall.Signal(0)) == nil {
				return false
			}
		}
		return true
	})
	time.Sleep(200 * time.Millisecond) // the output copied
	for _, out := range clientOut {
		var n clientCounts
		if json.Unmarshal(out.Bytes(), &n) != nil {
			continue
		}
		res.Clients.Conns += n.Conns
		res.Clients.Opens += n.Opens
		res.Clients.Refused += n.Refused
		res.Clients.Failed += n.Failed
		res.Clients.GoingAway += n.GoingAway
		res.Clients.Restart += n.Restart
		res.Clients.OtherClose += n.OtherClose
	}
	return res
}

// analyse fills in res's figures from the second instance's buckets,
// counted from t0, the stop.
func analyse(res *result, st stats, t0 time.Time) {
	var cum int64
	var nonEmpty []int64
	for i, n := range st.Opened {
		at := st.StartMS + int64(i)*st.BucketMS - t0.UnixMilli()
		res.Handshks += n
		if n == 0 {
			continue
		}
		nonEmpty = append(nonEmpty, n)
		if n > res.Peak {
			res.Peak, res.PeakAtMS = n, at
		}
		cum += n
		if cum >= int64(res.Conns) && res.AllMS == 0 {
			res.AllMS = at + st.BucketMS
		}
	}
	if len(nonEmpty) > 0 {
		slices.Sort(nonEmpty)
		res.P90 = nonEmpty[(len(nonEmpty)*9)/10]
	}
}
