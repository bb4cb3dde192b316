//go:build unix

package gustnats

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
)

// childEnv names the NATS URL TestPresenceKilledChild connects to; unset,
// the test is skipped (it runs only as the child of TestPresenceSIGKILL).
const childEnv = "GUST_PRESENCE_CHILD_NATS"

// TestPresenceKilledChild is the instance TestPresenceSIGKILL kills: it
// joins members, prints "ready", and waits to be killed.
func TestPresenceKilledChild(t *testing.T) {
	url := os.Getenv(childEnv)
	if url == "" {
		t.Skip("the child of TestPresenceSIGKILL")
	}
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	p, err := NewPresence(nc, &PresenceOptions{Subject: "test.presence", Heartbeat: testHeartbeat, Expiry: testExpiry})
	require.NoError(t, err)
	require.NoError(t, p.Join("room", "kid1"))
	require.NoError(t, p.Join("room", "kid2"))
	require.NoError(t, p.Join("other", "kid3"))
	require.NoError(t, nc.Flush())
	fmt.Println("ready")
	time.Sleep(60 * time.Second) // killed long before
	t.Fatal("not killed")
}

// A real kill -9: a child process (this test binary) joins members on the
// test's NATS server; once it is killed with SIGKILL, its members leave
// every view within Expiry of its last heartbeat, and stay gone.
func TestPresenceSIGKILL(t *testing.T) {
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{watch: []string{"room", "other"}})
	b := newInstance(t, "b", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	require.NoError(t, a.p.Join("room", "ann"))

	cmd := exec.Command(os.Args[0], "-test.run=^TestPresenceKilledChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+ns.ClientURL())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ready, outDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(outDone)
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "ready" {
				close(ready)
			}
		}
	}()
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			<-outDone
			cmd.Wait()
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the child never got ready")
	}
	a.members(t, "room", "ann", "kid1", "kid2")
	a.members(t, "other", "kid3")
	b.members(t, "room", "ann", "kid1", "kid2")

	// Its last word a heartbeat, as in life, not its joins (it printed
	// "ready" 250 ms after its start, its heartbeats come at 100 ms marks).
	time.Sleep(testHeartbeat * 7 / 4)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	start := time.Now()
	select {
	case <-outDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the child's stdout never closed")
	}
	err = cmd.Wait()
	killed = true
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())

	a.members(t, "other")
	a.members(t, "room", "ann")
	b.members(t, "room", "ann")
	took := time.Since(start)
	t.Logf("the killed instance's members left %v after SIGKILL (Expiry %v)", took, testExpiry)
	require.Less(t, took, testExpiry+2*testHeartbeat, "within Expiry of the last heartbeat")
	want := []hub.PresenceEvent{leaveEv("room", "kid1"), leaveEv("room", "kid2"), leaveEv("other", "kid3")}
	require.ElementsMatch(t, want, a.events.Wait(t, 7)[4:])
	// No ghost comes back.
	time.Sleep(2 * testExpiry)
	require.Equal(t, []string{"ann"}, a.p.Members(nil, "room"))
	require.Empty(t, a.p.Members(nil, "other"))
	require.Len(t, a.events.Get(), 7)
}
