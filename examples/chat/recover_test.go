package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestChatRecoversInChromium runs two chat instances (this package built
// and started as processes) on one NATS server with JetStream, run
// in-process, and two headless Chromium pages: alice's on instance A,
// bob's on B. Each sees the other in the member list (presence across
// instances). A is killed with SIGKILL: bob's page sees alice leave once
// A's presence expires, and bob talks while A is down. A restarts on its
// port; alice's page reconnects by itself, with backoff, passing the
// number of the last message it had, and shows what bob said meanwhile,
// each message once and in order, then what follows live.
func TestChatRecoversInChromium(t *testing.T) {
	chromium, driver := browser(t, "the chat's recovery")

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(ns.Shutdown)

	bin := filepath.Join(t.TempDir(), "chat")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "building the chat: %s", out)
	a := startInstance(t, bin, freeAddr(t), ns.ClientURL())
	b := startInstance(t, bin, freeAddr(t), ns.ClientURL())

	wd := startDriver(t, driver)
	alice := wd.newSession(t, chromium)
	bob := wd.newSession(t, chromium)
	alice.open(t, "http://"+a.addr+"/")
	alice.join(t, "alice", "lobby")
	bob.open(t, "http://"+b.addr+"/")
	bob.join(t, "bob", "lobby")
	alice.waitText(t, "#log", "bob joined")
	alice.waitText(t, "#members", "alice\nbob")
	bob.waitText(t, "#members", "alice\nbob")
	bob.say(t, "before")
	alice.waitText(t, "#log", "bob: before")

	// A freezes (SIGSTOP): what alice says goes into its socket and is
	// never read, never stored, never acknowledged; then A dies. Her page
	// keeps the message and sends it again once it is back.
	a.signal(t, syscall.SIGSTOP)
	alice.say(t, "while frozen")
	alice.waitFor(t, "the message pending", func() bool { return alice.data(t, "pending") == "1" })
	a.kill(t)
	alice.waitState(t, "reconnecting")
	bob.waitText(t, "#log", "alice left") // A's presence expired: no ghost
	require.NotContains(t, bob.text(t, "#members"), "alice")
	bob.say(t, "while away 1")
	bob.say(t, "while away 2")
	bob.waitText(t, "#log", "bob: while away 2")

	recovered := alice.data(t, "recovered")
	a.start(t)
	alice.waitState(t, "connected")
	alice.waitFor(t, "a recovery", func() bool { return alice.data(t, "recovered") != recovered })
	alice.waitText(t, "#log", "bob: while away 2")
	bob.waitText(t, "#members", "alice\nbob")
	bob.waitText(t, "#log", "alice: while frozen") // resent, stored once
	alice.waitFor(t, "its acknowledgement", func() bool { return alice.data(t, "pending") == "0" })
	bob.say(t, "after")
	alice.waitText(t, "#log", "bob: after")

	log := alice.text(t, "#log")
	at := -1
	for _, said := range []string{"bob: before", "bob: while away 1", "bob: while away 2", "alice: while frozen", "bob: after"} {
		require.Equal(t, 1, strings.Count(log, said), "%q in alice's log:\n%s", said, log)
		i := strings.Index(log, said)
		require.Greater(t, i, at, "%q out of order in alice's log:\n%s", said, log)
		at = i
	}
	require.NotContains(t, log, "could not be recovered")
	require.Equal(t, 1, strings.Count(bob.text(t, "#log"), "alice: while frozen"), "kept once")
	dir := os.Getenv("GUST_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "gust-chat-test")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "chat-recovered.png")
	require.NoError(t, os.WriteFile(path, alice.screenshot(t), 0o644))
	t.Logf("screenshot of alice's page after the recovery: %s\n%s", path, log)
}

// TestChatStartsOverInChromium restarts a chat whose history is in memory:
// the history the pages kept a place in is gone, and its numbers start
// again at 1. Each page reconnects with its old position, is told to start
// over (a new epoch), clears its log, and shows every message that
// follows — none muted because its number is below the one it had.
func TestChatStartsOverInChromium(t *testing.T) {
	chromium, driver := browser(t, "the chat's restart")
	bin := filepath.Join(t.TempDir(), "chat")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "building the chat: %s", out)
	a := startInstance(t, bin, freeAddr(t), "")

	wd := startDriver(t, driver)
	alice := wd.newSession(t, chromium)
	bob := wd.newSession(t, chromium)
	alice.open(t, "http://"+a.addr+"/")
	alice.join(t, "alice", "lobby")
	bob.open(t, "http://"+a.addr+"/")
	bob.join(t, "bob", "lobby")
	alice.waitText(t, "#members", "alice\nbob")
	for _, said := range []string{"before 1", "before 2", "before 3"} {
		bob.say(t, said)
	}
	alice.waitText(t, "#log", "bob: before 3")

	a.kill(t)
	alice.waitState(t, "reconnecting")
	a.start(t)
	alice.waitFor(t, "the page to start over", func() bool { return alice.data(t, "resets") == "1" })
	bob.waitFor(t, "the page to start over", func() bool { return bob.data(t, "resets") == "1" })
	alice.waitState(t, "connected")
	bob.waitState(t, "connected")
	require.NotContains(t, alice.text(t, "#log"), "before", "the old history is cleared")
	bob.say(t, "after")
	alice.waitText(t, "#log", "bob: after")
	alice.say(t, "back")
	bob.waitText(t, "#log", "alice: back")
	log := alice.text(t, "#log")
	require.Contains(t, log, "the room's history started over")
	require.NotContains(t, log, "before")
	t.Logf("alice's log after the restart:\n%s", log)
}

// data is a data- attribute of the page's status element.
func (s *session) data(t *testing.T, name string) string {
	t.Helper()
	v, _ := s.script(t, "return document.getElementById('status').dataset[arguments[0]] || '';", name).(string)
	return v
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// instance is a chat process, started again on the same address after a
// kill.
type instance struct {
	bin, addr, nats string
	mu              sync.Mutex
	cmd             *exec.Cmd
	logs            bytes.Buffer
}

func startInstance(t *testing.T, bin, addr, natsURL string) *instance {
	t.Helper()
	in := &instance{bin: bin, addr: addr, nats: natsURL}
	in.start(t)
	t.Cleanup(func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.cmd != nil {
			in.cmd.Process.Signal(syscall.SIGTERM)
			in.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("chat instance %s said:\n%s", in.addr, in.logs.String())
		}
	})
	return in
}

// start runs the process and waits until it serves the page.
func (in *instance) start(t *testing.T) {
	t.Helper()
	in.mu.Lock()
	args := []string{"-addr", in.addr}
	if in.nats != "" {
		args = append(args, "-nats", in.nats)
	}
	cmd := exec.Command(in.bin, args...)
	cmd.Stdout, cmd.Stderr = &in.logs, &in.logs
	require.NoError(t, cmd.Start())
	in.cmd = cmd
	in.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + in.addr + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("chat instance %s did not start: %v\n%s", in.addr, err, in.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signal sends the process sig (SIGSTOP freezes it).
func (in *instance) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	require.NoError(t, in.cmd.Process.Signal(sig))
}

// kill ends the process with SIGKILL: no close frames, no presence goodbye.
func (in *instance) kill(t *testing.T) {
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	require.NoError(t, in.cmd.Process.Kill())
	in.cmd.Wait()
	in.cmd = nil
}
