package gust

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/testkit"
)

// netpollCounts is a Metrics with the optional Netpoll method: it counts
// netpoll mode's events by name, and ignores the rest.
type netpollCounts struct {
	countingMetrics
	mu     sync.Mutex
	events map[string]int
}

func (m *netpollCounts) Netpoll(c *Conn, event string) {
	if c == nil {
		panic("Netpoll without a Conn")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.events == nil {
		m.events = map[string]int{}
	}
	m.events[event]++
}

func (m *netpollCounts) get(event string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events[event]
}

// warnRecords returns the Warn records in a text log that mention event.
func warnRecords(log, event string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "event="+event) {
			out = append(out, l)
		}
	}
	return out
}

// Connections that netpoll mode cannot put on an event loop are counted
// and logged, once a second at most, whatever the number: those whose
// descriptor cannot be duplicated (EMFILE, injected through dupHook for this
// test's connections alone) and those that are not plain sockets (a
// wrapped net.Conn). They stay in goroutine mode, which Conn.Netpoll tells,
// and work there; once descriptors free up, new connections go to a loop.
func TestNetpollFallbackIsCounted(t *testing.T) {
	m := &netpollCounts{}
	var logs testkit.Buffer
	hook := func(c *Conn) error {
		if c.cfg.Metrics == Metrics(m) {
			return syscall.EMFILE
		}
		return nil
	}
	unhook := hookDup(t, hook)

	h := newEcho()
	opts := &Options{Netpoll: true, Metrics: m, Logger: newLogger(&logs)}
	addr := startUpgrader(t, h, opts)
	const n = 5
	var sc *Conn
	for i := range n {
		c := dialRaw(t, addr, nil)
		sc = h.waitOpen(t)
		require.False(t, sc.Netpoll(), "connection %d stays in goroutine mode", i)
		c.send(frame(0x81, []byte("hi")))
		c.expectMessage(OpText, []byte("hi"))
	}
	require.Equal(t, n, m.get("fallback-fd"))
	recs := warnRecords(logs.String(), "fallback-fd")
	require.Len(t, recs, 1, "one record for the burst: %s", logs.String())
	require.Contains(t, recs[0], "too many open files")
	require.Contains(t, recs[0], "count=1")

	// Past a second (the last record's time moved back one, rather than
	// waited out), the next record counts what came since the last.
	nn := sc.cfg.netpollNotes
	nn.mu.Lock()
	nn.last[netpollFallbackFD] = nn.last[netpollFallbackFD].Add(-time.Second)
	nn.mu.Unlock()
	dialRaw(t, addr, nil)
	h.waitOpen(t)
	recs = warnRecords(logs.String(), "fallback-fd")
	require.Len(t, recs, 2)
	require.Contains(t, recs[1], "count=5", "the 4 after the first record, and this one")

	unhook()
	dialRaw(t, addr, nil)
	require.True(t, h.waitOpen(t).Netpoll(), "descriptors free: the next connection goes to a loop")
	require.Equal(t, n+1, m.get("fallback-fd"))

	// A connection that is not a plain socket (TLS, HTTP/2, a wrapper).
	peer, nc := tcpPair(t)
	wh := newRecorder()
	wc := newConn(struct{ net.Conn }{nc}, newConfig(*opts, true), wh, true, nil, "")
	go wc.ReadLoop()
	require.False(t, wc.Netpoll())
	require.Equal(t, 1, m.get("fallback-type"))
	recs = warnRecords(logs.String(), "fallback-type")
	require.Len(t, recs, 1)
	require.Contains(t, recs[0], `type="struct { net.Conn }"`)
	peer.Close()
	wh.waitClose(t)
}

// A callback that blocks an event loop past 100 ms is counted and logged
// with the connection and how long it held the loop.
func TestNetpollLoopHeldIsReported(t *testing.T) {
	m := &netpollCounts{}
	var logs testkit.Buffer
	h := newRecorder()
	h.message = func(c *Conn, msg *Message) {
		if string(msg.Data) == "block" {
			time.Sleep(250 * time.Millisecond)
		}
		c.WriteMessage(msg.Opcode, msg.Data)
		msg.Close()
	}
	addr := startServer(t, h, &Options{Netpoll: true, Metrics: m, Logger: newLogger(&logs)})
	c := dialRaw(t, addr, nil)
	sc := h.waitOpen(t)
	require.True(t, sc.Netpoll())
	require.Eventually(t, func() bool { return sc.sock().Parked() }, 5*time.Second, time.Millisecond)

	c.send(frame(0x81, []byte("quick")))
	c.expectMessage(OpText, []byte("quick"))
	require.Zero(t, m.get("blocked"), "a quick callback is not reported")

	require.Eventually(t, func() bool { return sc.sock().Parked() }, 5*time.Second, time.Millisecond)
	c.send(frame(0x81, []byte("block")))
	c.expectMessage(OpText, []byte("block"))
	// The loop counts the event, then logs it: wait for the record.
	require.Eventually(t, func() bool { return len(warnRecords(logs.String(), "blocked")) > 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 1, m.get("blocked"))
	recs := warnRecords(logs.String(), "blocked")
	require.Len(t, recs, 1)
	require.Contains(t, recs[0], "held its event loop")
	require.Contains(t, recs[0], "a callback that blocks?")
	require.Zero(t, m.get("held"))
	require.Contains(t, recs[0], "remote=")
}

// A turn that held its loop with no callback running (gust's own work, or
// a machine too busy to run the loop: a mass close used to do it) is
// counted as "held", not "blocked", and its record says that no callback
// ran rather than blame one.
func TestNetpollLoopHeldByGustSaysSo(t *testing.T) {
	m := &netpollCounts{}
	var logs testkit.Buffer
	h := newRecorder()
	addr := startServer(t, h, &Options{Netpoll: true, Metrics: m, Logger: newLogger(&logs)})
	dialRaw(t, addr, nil)
	sc := h.waitOpen(t)
	(*loopConn)(sc).Held(150*time.Millisecond, false)
	require.Equal(t, 1, m.get("held"))
	require.Zero(t, m.get("blocked"), "no callback to blame")
	require.Empty(t, warnRecords(logs.String(), "blocked"))
	recs := warnRecords(logs.String(), "held")
	require.Len(t, recs, 1)
	require.Contains(t, recs[0], "no callback ran: gust's own work")
	require.NotContains(t, recs[0], "a callback that blocks?")
	require.Contains(t, recs[0], "held=150ms")
}

// At the process's descriptor limit (lowered in a child process so that
// the next connection's two sockets take the last descriptors), the
// connection's descriptor cannot be duplicated: it stays in goroutine mode,
// works, and is counted and logged with EMFILE's text. Once descriptors
// free up, the next connection goes to an event loop.
func TestNetpollFallbackAtTheDescriptorLimit(t *testing.T) {
	if os.Getenv("GUST_TEST_FD_LIMIT") == "" {
		if testing.Short() {
			t.Skip("runs a child process")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestNetpollFallbackAtTheDescriptorLimit$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "GUST_TEST_FD_LIMIT=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestNetpollFallbackAtTheDescriptorLimit")
		return
	}
	m := &netpollCounts{}
	var logs testkit.Buffer
	h := newEcho()
	addr := startUpgrader(t, h, &Options{Netpoll: true, Metrics: m, Logger: newLogger(&logs)})
	dialRaw(t, addr, nil)
	first := h.waitOpen(t)
	require.True(t, first.Netpoll())
	// The first connection keeps the event loop, and its descriptors, open.
	require.Eventually(t, func() bool { return first.sock().Parked() }, 5*time.Second, time.Millisecond)

	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	free := freeDescriptors(t, 2)
	lim := syscall.Rlimit{Cur: uint64(free[1] + 1), Max: old.Max}
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	c := dialRaw(t, addr, nil) // its socket and the server's take the last two
	sc := h.waitOpen(t)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old))

	require.False(t, sc.Netpoll(), "no descriptor to duplicate: goroutine mode")
	c.send(frame(0x81, []byte("hi")))
	c.expectMessage(OpText, []byte("hi"))
	require.Equal(t, 1, m.get("fallback-fd"))
	recs := warnRecords(logs.String(), "fallback-fd")
	require.Len(t, recs, 1)
	require.Contains(t, recs[0], "too many open files")

	dialRaw(t, addr, nil)
	require.True(t, h.waitOpen(t).Netpoll(), "descriptors free: the next connection goes to a loop")
}

// freeDescriptors returns the n lowest descriptor numbers not in use.
func freeDescriptors(t *testing.T, n int) []int {
	t.Helper()
	d, err := os.Open("/proc/self/fd")
	require.NoError(t, err)
	own := int(d.Fd())
	names, err := d.Readdirnames(-1)
	d.Close()
	require.NoError(t, err)
	var used []int
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		require.NoError(t, err)
		if fd != own {
			used = append(used, fd)
		}
	}
	var free []int
	for fd := 0; len(free) < n; fd++ {
		if !slices.Contains(used, fd) {
			free = append(free, fd)
		}
	}
	return free
}
