package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type runConfig struct {
	conns, perClient, runs, basePort int
	modes, apps, transports          []string
	topics                           int
	watch                            string
	traceDir                         string // each server writes a runtime trace of its Shutdown here
	profile                          string // or, if "cpu", a CPU profile
}

// measurement is one configuration: serving mode, handler, transport.
type measurement struct {
	Mode      string `json:"mode"`      // goroutine or netpoll
	App       string `json:"app"`       // plain or hub
	Transport string `json:"transport"` // tcp or tls
}

// result is one measurement's JSON line.
type result struct {
	measurement
	Round   int          `json:"round"`
	Conns   int          `json:"conns"`
	Topics  int          `json:"topics,omitempty"`
	Watch   string       `json:"watch,omitempty"`
	Server  serverResult `json:"server"`
	Clients clientCounts `json:"clients"`
	Error   string       `json:"error,omitempty"`
}

// orchestrate measures every configuration, cfg.runs rounds of them in
// turn, and prints a JSON line per measurement on stdout.
func orchestrate(cfg runConfig) error {
	if cfg.conns <= 0 || cfg.perClient <= 0 {
		return errors.New("run: -conns and -per-client must be positive")
	}
	var ms []measurement
	for _, tr := range cfg.transports {
		for _, mode := range cfg.modes {
			for _, app := range cfg.apps {
				if mode != "goroutine" && mode != "netpoll" || app != "plain" && app != "hub" || tr != "tcp" && tr != "tls" {
					return fmt.Errorf("run: unknown configuration %s/%s/%s", mode, app, tr)
				}
				ms = append(ms, measurement{mode, app, tr})
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	n := 0
	for r := range cfg.runs {
		for _, m := range ms {
			logf("round %d: %s mode, %s, %s, %d connections", r+1, m.Mode, m.App, m.Transport, cfg.conns)
			res := measure(self, cfg, m, cfg.basePort+2*n, r+1)
			n++
			line, _ := json.Marshal(res)
			fmt.Println(string(line))
			if res.Error != "" {
				logf("%s", res.Error)
			} else {
				logf("shutdown %.0f ms, %d blocked (longest logged %.0f ms), cpu %.0f ms",
					res.Server.ShutdownMS, res.Server.Blocked, res.Server.HeldMaxMS, res.Server.CPUMS)
			}
		}
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "closebench: "+format+"\n", args...)
}

// procs are the processes of one measurement, each with its log file.
type procs struct {
	dir  string
	list []*exec.Cmd
	done []chan struct{}
}

// start starts name with args, its stderr (and stdout, unless out is
// given) to a log file in the measurement's directory.
func (p *procs) start(name, logName string, out io.Writer, args ...string) (*exec.Cmd, chan struct{}, error) {
	f, err := os.Create(filepath.Join(p.dir, logName))
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stderr = f
	cmd.Stdout = f
	if out != nil {
		cmd.Stdout = out
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, err
	}
	done := make(chan struct{})
	p.list, p.done = append(p.list, cmd), append(p.done, done)
	go func() {
		cmd.Wait() // copies the output before it returns
		f.Close()
		close(done)
	}()
	return cmd, done, nil
}

// stopAll ends every process: SIGTERM, then SIGKILL after grace.
func (p *procs) stopAll(grace time.Duration) {
	for _, cmd := range p.list {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for i, done := range p.done {
		select {
		case <-done:
		case <-deadline:
			p.list[i].Process.Kill()
			<-done
		}
	}
}

// tail returns the last lines of a log file of the measurement.
func (p *procs) tail(logName string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, logName))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

var httpc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// openConns asks a server's control route how many connections are open.
func openConns(control string) (int64, error) {
	resp, err := httpc.Get("http://" + control + "/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Open int64 `json:"open"`
	}
	return st.Open, json.NewDecoder(resp.Body).Decode(&st)
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

// measure runs one configuration: the server, the clients until every
// connection is open, then the server's Shutdown.
func measure(self string, cfg runConfig, m measurement, port, round int) (res result) {
	res = result{measurement: m, Round: round, Conns: cfg.conns}
	if m.App == "hub" {
		res.Topics, res.Watch = cfg.topics, cfg.watch
	}
	dir, err := os.MkdirTemp("", "closebench-")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	p := &procs{dir: dir}
	defer func() {
		p.stopAll(10 * time.Second)
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
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	control := fmt.Sprintf("127.0.0.1:%d", port+1)
	args := []string{"-mode", "server", "-addr", addr, "-control", control}
	if m.Mode == "netpoll" {
		args = append(args, "-netpoll")
	}
	if m.Transport == "tls" {
		args = append(args, "-tls")
	}
	if m.App == "hub" {
		args = append(args, "-hub", "-topics", fmt.Sprint(cfg.topics), "-watch", cfg.watch)
	}
	if cfg.traceDir != "" {
		args = append(args, "-trace", filepath.Join(cfg.traceDir, fmt.Sprintf("%s-%s-%s-%d.%s", m.Transport, m.Mode, m.App, round, map[bool]string{true: "pprof", false: "trace"}[cfg.profile == "cpu"])))
	}
	serverOut := &bytes.Buffer{}
	_, serverDone, err := p.start(self, "server.log", serverOut, args...)
	if err != nil {
		return fail("starting the server: %v", err)
	}
	if !waitFor(10*time.Second, func() bool { _, err := openConns(control); return err == nil }) {
		return fail("the server did not start: %s", p.tail("server.log"))
	}

	scheme := "ws"
	if m.Transport == "tls" {
		scheme = "wss"
	}
	k := (cfg.conns + cfg.perClient - 1) / cfg.perClient
	var clientOut []*bytes.Buffer
	for i := range k {
		n := min(cfg.perClient, cfg.conns-i*cfg.perClient)
		out := &bytes.Buffer{}
		if _, _, err := p.start(self, fmt.Sprintf("clients-%d.log", i), out,
			"-mode", "clients", "-url", scheme+"://"+addr+"/ws", "-source", fmt.Sprintf("127.0.0.%d", 10+i),
			"-conns", fmt.Sprint(n)); err != nil {
			return fail("starting clients: %v", err)
		}
		clientOut = append(clientOut, out)
	}
	setup := time.Minute + time.Duration(cfg.conns)*5*time.Millisecond
	var open int64
	connected := waitFor(setup, func() bool {
		n, err := openConns(control)
		if err == nil && n/5000 != open/5000 {
			logf("%d connections open", n)
		}
		open = n
		return err == nil && n >= int64(cfg.conns)
	})
	if !connected {
		return fail("%d of %d connections open after %v: %s", open, cfg.conns, setup, p.tail("clients-0.log"))
	}
	time.Sleep(time.Second) // the joins' notices delivered

	resp, err := httpc.Post("http://"+control+"/stop", "", nil)
	if err != nil {
		return fail("stopping the server: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fail("stopping the server: %s", resp.Status)
	}
	select {
	case <-serverDone:
	case <-time.After(3 * time.Minute):
		return fail("the server did not end: %s", p.tail("server.log"))
	}
	if err := json.Unmarshal(serverOut.Bytes(), &res.Server); err != nil {
		return fail("the server's result: %v: %s", err, p.tail("server.log"))
	}
	p.stopAll(10 * time.Second)
	for _, out := range clientOut {
		var n clientCounts
		if json.Unmarshal(out.Bytes(), &n) != nil {
			continue
		}
		res.Clients.Opened += n.Opened
		res.Clients.Failed += n.Failed
		res.Clients.GoingAway += n.GoingAway
		res.Clients.OtherClose += n.OtherClose
	}
	if res.Server.Err != "" {
		res.Error = "shutdown: " + res.Server.Err
	}
	return res
}
