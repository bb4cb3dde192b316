package gustnats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// startNATS runs a real NATS server in-process on 127.0.0.1:port (0: any).
func startNATS(t *testing.T, port int) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(s.Shutdown)
	return s
}

// gatedDialer dials NATS, except while closed: then each dial waits until it
// is opened again. It lets a test decide which Hub reconnects first.
type gatedDialer struct {
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (d *gatedDialer) Dial(network, addr string) (net.Conn, error) {
	d.mu.Lock()
	gate := d.gate
	d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-time.After(20 * time.Second):
			return nil, errors.New("gate never opened")
		}
	}
	return (&net.Dialer{Timeout: 2 * time.Second}).Dial(network, addr)
}

func (d *gatedDialer) close() {
	d.mu.Lock()
	d.gate = make(chan struct{})
	d.mu.Unlock()
}

func (d *gatedDialer) open() {
	d.mu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.mu.Unlock()
}

// machine is one "machine": a NATS connection, a Hub on it, and a gust
// Server on its own loopback port whose connections all join "room".
type machine struct {
	name         string
	nc           *nats.Conn
	broker       hub.Broker
	hub          *hub.Hub
	url          string
	dialer       *gatedDialer
	disconnected chan struct{}
	reconnected  chan struct{}
}

type joinRoom struct {
	gust.BuiltinEventHandler
	hub    *hub.Hub
	noRoom bool          // connections join no topic when they open
	epoch  func() string // the history's epoch, for since:T:N
}

func (j joinRoom) OnOpen(c *gust.Conn) {
	if j.noRoom {
		return
	}
	if err := j.hub.Subscribe(c, "room"); err != nil {
		panic(err)
	}
}

// OnMessage takes "join:T" and "leave:T", and answers "ok:" and the command.
func (j joinRoom) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	cmd, topic, _ := strings.Cut(string(m.Data), ":")
	switch cmd {
	case "join":
		if err := j.hub.Subscribe(c, topic); err != nil {
			panic(err)
		}
	case "leave":
		j.hub.Unsubscribe(c, topic)
	case "since": // since:T:N (N of the history's epoch as it is now), since:T:EPOCH:N
		topic, at, _ := strings.Cut(topic, ":")
		pos, err := hub.ParsePosition(at)
		if err != nil {
			panic(err)
		}
		if !strings.Contains(at, ":") {
			pos.Epoch = j.epoch()
		}
		if err := j.hub.SubscribeSince(c, topic, pos); err != nil {
			panic(err)
		}
	default:
		return
	}
	c.WriteString("ok:" + string(m.Data))
}

func startMachine(t *testing.T, name, natsURL string, extra ...nats.Option) *machine {
	t.Helper()
	return startMachineWith(t, name, natsURL, func(nc *nats.Conn) hub.Broker { return New(nc, "test.hub") }, extra...)
}

// startMachineWith starts a machine whose Hub has the Broker mk makes on
// its NATS connection.
func startMachineWith(t *testing.T, name, natsURL string, mk func(*nats.Conn) hub.Broker, extra ...nats.Option) *machine {
	t.Helper()
	m := &machine{name: name, dialer: &gatedDialer{}, disconnected: make(chan struct{}, 16), reconnected: make(chan struct{}, 16)}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.SetCustomDialer(m.dialer),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { m.disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { m.reconnected <- struct{}{} }),
	}, extra...)
	nc, err := nats.Connect(natsURL, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	m.nc = nc
	broker := mk(nc)
	m.broker = broker
	m.hub, err = hub.New(&hub.Options{Broker: broker})
	require.NoError(t, err)
	t.Cleanup(func() { m.hub.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// The outboxes hold a whole test's messages: another machine's
	// publisher is paced by nothing here, and NATS hands its messages over
	// in bursts that the default 256 would answer with a close as slow.
	wsOpts := gust.Options{OutboxSize: 8192, OutboxPolicy: gust.OutboxCloseSlow}
	j := joinRoom{hub: m.hub, epoch: func() string { return "" }}
	if hb, ok := broker.(hub.HistoryBroker); ok {
		j.noRoom, j.epoch = true, hb.Epoch
	}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: m.hub.Wrap(j), Options: wsOpts}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	m.url = "ws://" + ln.Addr().String() + "/"
	return m
}

// client is a WebSocket client that records the text messages it gets.
type client struct {
	gust.BuiltinEventHandler
	conn *gust.Conn
	mu   sync.Mutex
	got  []string
	n    atomic.Int64
	acks chan string // the server's "ok:" answers, not recorded in got
	done chan struct{}
}

func (c *client) OnMessage(_ *gust.Conn, m *gust.Message) {
	if strings.HasPrefix(string(m.Data), "ok:") {
		c.acks <- string(m.Data)
		m.Close()
		return
	}
	c.mu.Lock()
	c.got = append(c.got, string(m.Data))
	c.mu.Unlock()
	c.n.Add(1)
	m.Close()
}

func (c *client) OnClose(*gust.Conn, error) { close(c.done) }

func (c *client) messages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func (m *machine) connect(t *testing.T, n int) []*client {
	t.Helper()
	var cs []*client
	before := m.hub.Stats().Connections
	for range n {
		c := &client{acks: make(chan string, 16), done: make(chan struct{})}
		conn, _, err := gust.Dial(context.Background(), m.url, c, nil)
		require.NoError(t, err)
		c.conn = conn
		go conn.ReadLoop()
		t.Cleanup(func() {
			conn.Close(gust.StatusNormalClosure, "")
			<-c.done
		})
		cs = append(cs, c)
	}
	waitFor(t, m.name+"'s clients to join", func() bool { return m.hub.Stats().Connections == before+n })
	return cs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wait(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// count returns how many times each message arrived.
func count(msgs []string) map[string]int {
	m := make(map[string]int)
	for _, s := range msgs {
		m[s]++
	}
	return m
}

// Two machines publish at once; every client of both gets every message
// exactly once, and each machine's messages in the order it published them.
func TestTwoMachines(t *testing.T) {
	ns := startNATS(t, 0)
	a := startMachine(t, "a", ns.ClientURL())
	b := startMachine(t, "b", ns.ClientURL())
	clients := append(a.connect(t, 3), b.connect(t, 3)...)

	const each = 2000
	var wg sync.WaitGroup
	for _, m := range []*machine{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := m.hub.Publish("room", gust.OpText, fmt.Appendf(nil, "%s-%d", m.name, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, a.hub.PublishAll(gust.OpText, []byte("to all")))
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d", i), func() bool { return c.n.Load() >= 2*each+1 })
	}
	time.Sleep(50 * time.Millisecond) // a duplicate would arrive by now
	for i, c := range clients {
		msgs := c.messages()
		require.Len(t, msgs, 2*each+1, "client %d", i)
		next := map[string]int{"a": 0, "b": 0}
		for _, s := range msgs {
			if s == "to all" {
				continue
			}
			origin, num, _ := strings.Cut(s, "-")
			require.Equal(t, fmt.Sprint(next[origin]), num, "client %d: %s out of order", i, s)
			next[origin]++
		}
		require.Equal(t, map[string]int{"a": each, "b": each}, next)
	}
	for _, m := range []*machine{a, b} {
		st := m.hub.Stats()
		require.Zero(t, st.Dropped)
		require.Zero(t, st.ClosedSlow)
		require.EqualValues(t, 3*(2*each+1), st.Delivered)
	}
}

// The NATS server restarts. nats.go reconnects both machines by itself;
// what a machine publishes during the outage reaches its own clients at
// once, and the other machine's clients only if the other machine
// reconnected before the publisher flushed its reconnect buffer.
func TestBrokerRestart(t *testing.T) {
	ns := startNATS(t, 0)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	a := startMachine(t, "a", url)
	b := startMachine(t, "b", url)
	ca := a.connect(t, 2)
	cb := b.connect(t, 2)
	all := append(append([]*client(nil), ca...), cb...)

	require.NoError(t, a.hub.Publish("room", gust.OpText, []byte("before")))
	for _, c := range all {
		waitFor(t, "before", func() bool { return c.n.Load() == 1 })
	}

	// outage stops the server, publishes msg on a while both machines are
	// cut off, and restarts the server; first reconnects first.
	outage := func(msg string, first, second *machine) {
		t.Helper()
		a.dialer.close()
		b.dialer.close()
		ns.Shutdown()
		ns.WaitForShutdown()
		wait(t, a.disconnected, "a to notice")
		wait(t, b.disconnected, "b to notice")

		require.NoError(t, a.hub.Publish("room", gust.OpText, []byte(msg)), "buffered by nats.go")
		for _, c := range ca {
			waitFor(t, "a's own clients", func() bool { return count(c.messages())[msg] == 1 })
		}

		ns = startNATS(t, port)
		first.dialer.open()
		wait(t, first.reconnected, first.name+" to reconnect")
		require.NoError(t, first.nc.Flush()) // its buffer, and its subscription, have reached the server
		second.dialer.open()
		wait(t, second.reconnected, second.name+" to reconnect")
		require.NoError(t, second.nc.Flush())
	}

	// b reconnects first: a's buffered message reaches b's clients, once.
	outage("during outage 1", b, a)
	for _, c := range cb {
		waitFor(t, "the buffered message on b", func() bool { return count(c.messages())["during outage 1"] == 1 })
	}

	// a reconnects first and flushes its buffer before b has subscribed
	// again: b's clients never get that message.
	outage("during outage 2", a, b)

	// Both are up again: nothing is lost, nothing repeated.
	require.NoError(t, a.hub.Publish("room", gust.OpText, []byte("after a")))
	require.NoError(t, b.hub.Publish("room", gust.OpText, []byte("after b")))
	for _, c := range all {
		waitFor(t, "after", func() bool { m := count(c.messages()); return m["after a"] == 1 && m["after b"] == 1 })
	}
	time.Sleep(50 * time.Millisecond)
	for _, c := range ca {
		require.Equal(t, []string{"before", "during outage 1", "during outage 2", "after a", "after b"}, c.messages())
	}
	for _, c := range cb {
		require.Equal(t, map[string]int{"before": 1, "during outage 1": 1, "after a": 1, "after b": 1}, count(c.messages()))
	}
}

// With nats.go's reconnect buffer off, Hub.Publish reports the outage: the
// message reached the local clients only.
func TestBrokerDownWithoutBuffer(t *testing.T) {
	ns := startNATS(t, 0)
	a := startMachine(t, "a", ns.ClientURL(), nats.ReconnectBufSize(-1))
	b := startMachine(t, "b", ns.ClientURL())
	ca := a.connect(t, 1)
	cb := b.connect(t, 1)
	a.dialer.close()
	ns.Shutdown()
	wait(t, a.disconnected, "a to notice")

	err := a.hub.Publish("room", gust.OpText, []byte("local only"))
	require.ErrorIs(t, err, nats.ErrReconnectBufExceeded)
	waitFor(t, "the local client", func() bool { return ca[0].n.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, cb[0].n.Load())
	a.dialer.open()
}

func TestTopicSubjects(t *testing.T) {
	for _, topic := range []string{"room", "a-b_C9", "", "with space", "a.b", "*", ">", "~x", "é"} {
		tok := encodeTopic(topic)
		require.NotContains(t, tok, ".")
		require.NotContains(t, tok, " ")
		require.NotEqual(t, "*", tok)
		require.NotEqual(t, ">", tok)
		got, ok := decodeTopic(tok)
		require.True(t, ok, topic)
		require.Equal(t, topic, got)
	}
	_, ok := decodeTopic("~!!")
	require.False(t, ok)
}
