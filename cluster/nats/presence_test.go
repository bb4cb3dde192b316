package gustnats

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
	"github.com/gustws/gust/internal/testkit"
)

// Test timings: an instance unheard for 600 ms is dropped.
const (
	testHeartbeat = 100 * time.Millisecond
	testExpiry    = 600 * time.Millisecond
)

// instance is a Presence on its own NATS connection, with a recorder per
// watched topic.
type instance struct {
	name   string
	nc     *nats.Conn
	p      *Presence
	dialer *partitionDialer
	events *testkit.Recorder[hub.PresenceEvent]
}

type instanceOpts struct {
	presence PresenceOptions
	watch    []string // topics to watch from the start
}

// newInstance connects to NATS and starts a Presence with the test
// timings; Cleanup closes both.
func newInstance(t *testing.T, name, url string, o *instanceOpts) *instance {
	t.Helper()
	if o == nil {
		o = &instanceOpts{}
	}
	in := &instance{name: name, dialer: &partitionDialer{}, events: &testkit.Recorder[hub.PresenceEvent]{}}
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.SetCustomDialer(in.dialer))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	opts := o.presence
	opts.Subject = cmpOr(opts.Subject, "test.presence")
	opts.Heartbeat = cmpOr(opts.Heartbeat, testHeartbeat)
	opts.Expiry = cmpOr(opts.Expiry, testExpiry)
	opts.Logger = slog.New(slog.DiscardHandler)
	in.nc = nc
	in.p, err = NewPresence(nc, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { in.p.Close() })
	for _, topic := range o.watch {
		_, err := in.p.Watch(topic, in.events.Add)
		require.NoError(t, err)
	}
	return in
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// members waits until in's view of topic is want (sorted).
func (in *instance) members(t *testing.T, topic string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	waitFor(t, fmt.Sprintf("%s to see %v in %s", in.name, want, topic), func() bool {
		return slices.Equal(in.p.Members([]string{}, topic), want)
	})
}

// holds waits until in's view has member in topic from other's report.
func (in *instance) holds(t *testing.T, other *instance, topic, member string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to hold %s's %s in %s", in.name, other.name, member, topic), func() bool {
		in.p.mu.Lock()
		defer in.p.mu.Unlock()
		pr := in.p.peers[other.p.ID()]
		if pr == nil {
			return false
		}
		_, ok := pr.topics[topic][member]
		return ok
	})
}

func joinEv(topic, member string) hub.PresenceEvent {
	return hub.PresenceEvent{Topic: topic, Member: member, Joined: true}
}

func leaveEv(topic, member string) hub.PresenceEvent {
	return hub.PresenceEvent{Topic: topic, Member: member}
}

// Three instances see each other's joins and leaves; each watcher hears of
// each change once, and Members is the union.
func TestPresenceAcrossInstances(t *testing.T) {
	ns := startNATS(t, 0)
	w := &instanceOpts{watch: []string{"room"}}
	a := newInstance(t, "a", ns.ClientURL(), w)
	b := newInstance(t, "b", ns.ClientURL(), w)
	c := newInstance(t, "c", ns.ClientURL(), w)

	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, b.p.Join("room", "bob"))
	require.NoError(t, b.p.Join("room with spaces", "bob")) // an escaped subject
	require.NoError(t, b.p.Join("other", "bob"))            // nobody else follows it
	for _, in := range []*instance{a, b, c} {
		in.members(t, "room", "ann", "bob")
		require.ElementsMatch(t, []hub.PresenceEvent{joinEv("room", "ann"), joinEv("room", "bob")}, in.events.Wait(t, 2), in.name)
	}
	require.Empty(t, c.p.Members(nil, "other"), "c does not follow other")

	require.NoError(t, a.p.Leave("room", "ann"))
	for _, in := range []*instance{a, b, c} {
		in.members(t, "room", "bob")
		require.Equal(t, leaveEv("room", "ann"), in.events.Wait(t, 3)[2], in.name)
	}
	time.Sleep(50 * time.Millisecond) // an extra event would show now
	for _, in := range []*instance{a, b, c} {
		require.Len(t, in.events.Get(), 3, in.name)
	}
}

// A member joined on two instances, and twice on one (two tabs), is one
// member: the watchers hear of it when it first comes and when its last
// join has left.
//
// Each instance's messages reach c in the order it sent them, but not in
// order with another's: had a's leave reached c before b's join, c would
// rightly have seen ann leave and come back. So c holds b's join before a
// leaves.
func TestPresenceMemberOnTwoInstances(t *testing.T) {
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), nil)
	b := newInstance(t, "b", ns.ClientURL(), nil)
	c := newInstance(t, "c", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})

	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, b.p.Join("room", "ann"))
	c.holds(t, a, "room", "ann")
	c.holds(t, b, "room", "ann")
	require.NoError(t, a.p.Leave("room", "ann"))
	require.NoError(t, a.p.Leave("room", "ann"))
	a.members(t, "room") // a stopped following: it lists nothing
	require.Equal(t, []string{"ann"}, b.p.Members(nil, "room"))
	// b's leave goes after a's has been handled, and a's and b's markers
	// after everything else either sent: once c has them, any extra event
	// would be in.
	require.NoError(t, a.nc.Flush())
	c.drain(t)
	require.Equal(t, []string{"ann"}, c.p.Members(nil, "room"), "still on b")
	require.NoError(t, b.p.Leave("room", "ann"))
	c.members(t, "room")
	require.NoError(t, a.p.Join("room", "a-end"))
	require.NoError(t, b.p.Join("room", "b-end"))
	c.members(t, "room", "a-end", "b-end")
	ev := c.events.Wait(t, 4)
	require.Equal(t, []hub.PresenceEvent{joinEv("room", "ann"), leaveEv("room", "ann")}, ev[:2])
	require.ElementsMatch(t, []hub.PresenceEvent{joinEv("room", "a-end"), joinEv("room", "b-end")}, ev[2:])
}

// An instance that starts following a topic late gets the others' members
// before Join or Watch returns, not as joins.
func TestPresenceSnapshotForLateFollower(t *testing.T) {
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), nil)
	b := newInstance(t, "b", ns.ClientURL(), nil)
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, b.p.Join("room", "bob"))
	require.NoError(t, a.p.Join("other", "dave"))
	// Many members, over several state messages.
	var many []string
	for i := range 3000 {
		m := fmt.Sprintf("member-%04d-%s", i, bytes.Repeat([]byte("x"), 20))
		many = append(many, m)
		require.NoError(t, b.p.Join("big", m))
	}
	require.NoError(t, b.nc.Flush())
	require.NoError(t, a.nc.Flush())

	time.Sleep(300 * time.Millisecond) // past a fresh instance's discovery, so no wait hides a bug
	d := newInstance(t, "d", ns.ClientURL(), nil)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	require.NoError(t, d.p.Join("room", "carol"))
	require.Less(t, time.Since(start), 200*time.Millisecond, "every instance answered: no need to wait for the timeout")
	require.Equal(t, []string{"ann", "bob", "carol"}, d.p.Members(nil, "room"))

	var r testkit.Recorder[hub.PresenceEvent]
	stop, err := d.p.Watch("other", r.Add)
	require.NoError(t, err)
	defer stop()
	require.Equal(t, []string{"dave"}, d.p.Members(nil, "other"))
	_, err = d.p.Watch("big", r.Add)
	require.NoError(t, err)
	require.Equal(t, many, d.p.Members(nil, "big"))

	require.NoError(t, a.p.Join("other", "erin"))
	require.Equal(t, []hub.PresenceEvent{joinEv("other", "erin")}, r.Wait(t, 1), "dave was there before Watch")
	a.members(t, "room", "ann", "bob", "carol")

	// A fresh instance's first Join waits for the others it has not heard
	// yet (its discovery), and finds them.
	e := newInstance(t, "e", ns.ClientURL(), nil)
	require.NoError(t, e.p.Join("room", "eve"))
	require.Equal(t, []string{"ann", "bob", "carol", "eve"}, e.p.Members(nil, "room"))
}

// Close tells the others at once: its members leave well before Expiry.
// Afterwards its methods fail with hub.ErrClosed.
func TestPresenceClose(t *testing.T) {
	ns := startNATS(t, 0)
	slow := PresenceOptions{Heartbeat: time.Second, Expiry: time.Hour}
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{presence: slow})
	b := newInstance(t, "b", ns.ClientURL(), &instanceOpts{presence: slow, watch: []string{"room"}})
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, a.p.Join("room", "amy"))
	b.members(t, "room", "amy", "ann")

	start := time.Now()
	require.NoError(t, a.p.Close())
	require.NoError(t, a.p.Close())
	b.members(t, "room")
	require.Less(t, time.Since(start), 2*time.Second)
	require.ElementsMatch(t, []hub.PresenceEvent{leaveEv("room", "amy"), leaveEv("room", "ann")}, b.events.Wait(t, 4)[2:])

	require.ErrorIs(t, a.p.Join("room", "x"), hub.ErrClosed)
	require.ErrorIs(t, a.p.Leave("room", "ann"), hub.ErrClosed)
	_, err := a.p.Watch("room", func(hub.PresenceEvent) {})
	require.ErrorIs(t, err, hub.ErrClosed)
	require.Empty(t, a.p.Members(nil, "room"))
}

// partitionDialer dials NATS through connections it can cut: partition
// holds what the client writes and stops its reads, as a network that
// drops packets does while TCP keeps the connection (nats.go notices
// nothing); heal delivers what was held. block refuses new dials until
// unblock, and kill closes the connection (nats.go reconnects).
type partitionDialer struct {
	mu      sync.Mutex
	conns   []*partitionConn
	blocked bool
}

func (d *partitionDialer) Dial(network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.blocked {
		return nil, errors.New("dial blocked by the test")
	}
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	pc := &partitionConn{Conn: c, healed: make(chan struct{})}
	close(pc.healed)
	d.conns = append(d.conns, pc)
	return pc, nil
}

func (d *partitionDialer) each(f func(*partitionConn)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		f(c)
	}
}

func (d *partitionDialer) partition() { d.each((*partitionConn).cut) }
func (d *partitionDialer) heal()      { d.each((*partitionConn).heal) }

func (d *partitionDialer) kill() {
	d.mu.Lock()
	d.blocked = true
	d.mu.Unlock()
	d.each(func(c *partitionConn) { c.Conn.Close() })
}

func (d *partitionDialer) unblock() {
	d.mu.Lock()
	d.blocked = false
	d.mu.Unlock()
}

type partitionConn struct {
	net.Conn
	mu     sync.Mutex
	held   []byte
	healed chan struct{} // closed while not cut
}

func (c *partitionConn) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.healed:
		c.healed = make(chan struct{})
	default:
	}
}

func (c *partitionConn) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.healed:
	default:
		c.Conn.Write(c.held)
		c.held = nil
		close(c.healed)
	}
}

func (c *partitionConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.healed:
		return c.Conn.Write(b)
	default:
		c.held = append(c.held, b...)
		return len(b), nil
	}
}

func (c *partitionConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	healed := c.healed
	c.mu.Unlock()
	select {
	case <-healed:
	case <-time.After(20 * time.Second):
		return 0, errors.New("partition never healed")
	}
	return c.Conn.Read(b)
}

// An instance cut off without a word (a partition: its connection stays
// up, nothing passes) is dropped by the others within Expiry; when the
// network heals, each side asks the other again and the members are back.
func TestPresenceExpiryOnPartition(t *testing.T) {
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	x := newInstance(t, "x", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, x.p.Join("room", "xavier"))
	require.NoError(t, x.p.Join("room", "xena"))
	a.members(t, "room", "ann", "xavier", "xena")
	x.members(t, "room", "ann", "xavier", "xena")

	x.dialer.partition()
	cut := time.Now()
	a.members(t, "room", "ann")
	took := time.Since(cut)
	require.Less(t, took, testExpiry+2*testHeartbeat, "dropped within Expiry of x's last heartbeat")
	require.Greater(t, took, testExpiry-2*testHeartbeat, "not before Expiry")
	require.ElementsMatch(t, []hub.PresenceEvent{leaveEv("room", "xavier"), leaveEv("room", "xena")}, a.events.Wait(t, 5)[3:])
	// x, hearing nothing, drops a's members too.
	x.members(t, "room", "xavier", "xena")

	x.dialer.heal()
	a.members(t, "room", "ann", "xavier", "xena")
	x.members(t, "room", "ann", "xavier", "xena")
	// Changes flow again.
	require.NoError(t, a.p.Leave("room", "ann"))
	x.members(t, "room", "xavier", "xena")
}

// An instance whose connection dies, and that cannot reconnect for a while,
// is dropped within Expiry; it does not drop the others (it cannot hear
// them, which proves nothing). Back, it sends what changed meanwhile.
func TestPresenceExpiryOnDisconnect(t *testing.T) {
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	x := newInstance(t, "x", ns.ClientURL(), nil)
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, x.p.Join("room", "xavier"))
	a.members(t, "room", "ann", "xavier")
	x.members(t, "room", "ann", "xavier")

	x.dialer.kill()
	killed := time.Now()
	a.members(t, "room", "ann")
	require.Less(t, time.Since(killed), testExpiry+2*testHeartbeat)
	require.NoError(t, x.p.Join("room", "xena"), "buffered by nats.go")
	time.Sleep(testExpiry)
	require.Equal(t, []string{"ann", "xavier", "xena"}, x.p.Members(nil, "room"), "x keeps a's members while it cannot hear")

	x.dialer.unblock()
	a.members(t, "room", "ann", "xavier", "xena")
	x.members(t, "room", "ann", "xavier", "xena")
	require.Equal(t, []hub.PresenceEvent{
		joinEv("room", "ann"), joinEv("room", "xavier"), leaveEv("room", "xavier"),
	}, a.events.Get()[:3])
	require.ElementsMatch(t, []hub.PresenceEvent{joinEv("room", "xavier"), joinEv("room", "xena")}, a.events.Wait(t, 5)[3:])
}

// The NATS server restarts: every instance reconnects, asks the others
// again, and their views agree, changes made during the outage included.
func TestPresenceServerRestart(t *testing.T) {
	ns := startNATS(t, 0)
	port := ns.Addr().(*net.TCPAddr).Port
	a := newInstance(t, "a", ns.ClientURL(), nil)
	b := newInstance(t, "b", ns.ClientURL(), nil)
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, b.p.Join("room", "bob"))
	require.NoError(t, b.p.Join("room", "bea"))
	a.members(t, "room", "ann", "bea", "bob")

	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor(t, "both to notice", func() bool { return !a.nc.IsConnected() && !b.nc.IsConnected() })
	require.NoError(t, a.p.Join("room", "amy"))
	require.NoError(t, b.p.Leave("room", "bea"))
	startNATS(t, port)
	a.members(t, "room", "amy", "ann", "bob")
	b.members(t, "room", "amy", "ann", "bob")
	for _, in := range []*instance{a, b} {
		in.p.mu.Lock()
		epoch := in.p.epoch
		in.p.mu.Unlock()
		require.NotZero(t, epoch, "%s handled its reconnect", in.name)
	}
}

// Options are checked.
func TestPresenceOptions(t *testing.T) {
	ns := startNATS(t, 0)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	_, err = NewPresence(nc, &PresenceOptions{Heartbeat: time.Second, Expiry: time.Second})
	require.Error(t, err)
	_, err = NewPresence(nc, &PresenceOptions{ResumeGrace: -time.Second})
	require.Error(t, err)
	p, err := NewPresence(nc, nil)
	require.NoError(t, err)
	require.Len(t, p.ID(), 16)
	require.Equal(t, 3*time.Second, p.expiry)
	require.Equal(t, time.Second, p.resumeGrace)
	require.Equal(t, time.Second, p.lateLimit, "Heartbeat, below Expiry-Heartbeat")
	require.NoError(t, p.Close())
	nc.Close()
	_, err = NewPresence(nc, nil)
	require.ErrorIs(t, err, nats.ErrConnectionClosed)
}

// The connection closes for good: the others' members leave the view (they
// would be ghosts), the local ones stay, Join and Leave report it, and the
// others drop the instance after Expiry.
func TestPresenceConnectionClosed(t *testing.T) {
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	b := newInstance(t, "b", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	require.NoError(t, a.p.Join("room", "ann"))
	require.NoError(t, b.p.Join("room", "bob"))
	a.members(t, "room", "ann", "bob")
	b.members(t, "room", "ann", "bob")

	a.nc.Close()
	a.members(t, "room", "ann")
	require.ErrorIs(t, a.p.Join("room", "amy"), nats.ErrConnectionClosed)
	require.ErrorIs(t, a.p.Join("new topic", "amy"), nats.ErrConnectionClosed)
	require.ErrorIs(t, a.p.Leave("room", "ann"), nats.ErrConnectionClosed)
	b.members(t, "room", "bob")
	require.NoError(t, a.p.Close())
}

// An instance follows a topic while it has members in it or watches it:
// NATS brings it that topic's changes then, and no other.
func TestPresenceFollowsOnlyItsTopics(t *testing.T) {
	ns := startNATS(t, 0)
	slow := PresenceOptions{Heartbeat: time.Hour, Expiry: 2 * time.Hour} // no heartbeat in the counts
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{presence: slow})
	b := newInstance(t, "b", ns.ClientURL(), &instanceOpts{presence: slow})
	require.NoError(t, b.p.Join("mine", "bob"))

	before := received(t, b.nc)
	for i := range 100 {
		require.NoError(t, a.p.Join("room", fmt.Sprint("m", i)))
	}
	require.NoError(t, a.p.Join("mine", "ann"))
	require.NoError(t, a.nc.Flush())
	b.members(t, "mine", "ann", "bob")
	// a's question when it began following each topic (2), its join to mine.
	require.Equal(t, uint64(3), received(t, b.nc)-before)

	stop, err := b.p.Watch("room", func(hub.PresenceEvent) {})
	require.NoError(t, err)
	require.Len(t, b.p.Members(nil, "room"), 100)
	require.NoError(t, a.p.Leave("room", "m0"))
	b.members(t, "room", a.p.Members(nil, "room")...)
	stop()
	require.NoError(t, b.p.Leave("mine", "bob"))
	b.p.mu.Lock()
	require.Empty(t, b.p.topics, "b follows nothing")
	b.p.mu.Unlock()
	require.Empty(t, b.p.Members(nil, "room"))

	before = received(t, b.nc)
	require.NoError(t, a.p.Leave("room", "m1"))
	require.NoError(t, a.p.Leave("mine", "ann"))
	require.NoError(t, a.nc.Flush())
	require.Equal(t, uint64(0), received(t, b.nc)-before)
}

// received returns how many messages NATS has delivered to nc, after a
// flush: whatever the server had queued for it before is counted.
func received(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	require.NoError(t, nc.Flush())
	return nc.Stats().InMsgs
}
