package gustnats

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// startJetStream runs a NATS server with JetStream in-process on
// 127.0.0.1:port (0: any), storing in dir.
func startJetStream(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true, JetStream: true, StoreDir: dir})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(s.Shutdown)
	return s
}

func startHistoryMachine(t *testing.T, name, url string, opts *HistoryOptions, extra ...nats.Option) *machine {
	t.Helper()
	o := HistoryOptions{Subject: "test.hub"}
	if opts != nil {
		o = *opts
		o.Subject = "test.hub"
	}
	return startMachineWith(t, name, url, func(nc *nats.Conn) hub.Broker {
		b, err := NewHistory(context.Background(), nc, &o)
		require.NoError(t, err)
		return b
	}, extra...)
}

// says decodes what c received (hub.FrameJSON) as "T#seq text", "T gap N",
// "T reset" (a gap that says to start over), "T recovered N".
func (c *client) says(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, s := range c.messages() {
		var n struct {
			Topic     string
			Seq       uint64
			Data      json.RawMessage
			Gap       *uint64
			Reset     bool
			Recovered *uint64
		}
		require.NoError(t, json.Unmarshal([]byte(s), &n), s)
		switch {
		case n.Gap != nil && n.Reset:
			out = append(out, fmt.Sprintf("%s reset", n.Topic))
		case n.Gap != nil:
			out = append(out, fmt.Sprintf("%s gap %d", n.Topic, *n.Gap))
		case n.Recovered != nil:
			out = append(out, fmt.Sprintf("%s recovered %d", n.Topic, *n.Recovered))
		default:
			text := string(n.Data) // JSON as it is; other text as a JSON string
			json.Unmarshal(n.Data, &text)
			out = append(out, fmt.Sprintf("%s#%d %s", n.Topic, n.Seq, text))
		}
	}
	return out
}

func waitSays(t *testing.T, c *client, want ...string) {
	t.Helper()
	waitFor(t, fmt.Sprint(want), func() bool { return int(c.n.Load()) >= len(want) })
	time.Sleep(30 * time.Millisecond) // a duplicate would show now
	require.Equal(t, want, c.says(t))
}

// publish publishes on m's Hub, and waits until the stream has stored the
// message (Hub.Publish hands it to the broker and returns).
func publish(t *testing.T, m *machine, topic, text string) {
	t.Helper()
	require.NoError(t, m.hub.Publish(topic, gust.OpText, []byte(text)))
	b := m.broker.(*HistoryBroker)
	waitFor(t, "the stream to store "+text, func() bool { return b.queued.Load() == 0 })
}

// Two instances deliver a topic's messages, each instance's own included,
// numbered in one order; an instance without subscribers to a topic gets
// nothing of it from NATS.
func TestHistoryNumbersAcrossInstances(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	a := startHistoryMachine(t, "a", ns.ClientURL(), nil)
	b := startHistoryMachine(t, "b", ns.ClientURL(), nil)
	c := startHistoryMachine(t, "c", ns.ClientURL(), nil)
	ca, cb := a.connect(t, 1)[0], b.connect(t, 1)[0]
	ca.send(t, a, "join:room")
	cb.send(t, b, "join:room")

	before := inMsgs(t, c)
	publish(t, a, "room", "one")
	publish(t, b, "room", "two")
	publish(t, c, "room", "three")
	publish(t, a, "other", "x")
	waitSays(t, ca, "room#1 one", "room#2 two", "room#3 three")
	waitSays(t, cb, "room#1 one", "room#2 two", "room#3 three")
	require.Equal(t, []uint64{1}, since(inMsgs(t, c), before), "c has no subscribers: NATS brings it the PubAck of its Publish, nothing else")
}

// A client that comes back, to another instance, with the last sequence it
// saw gets what it missed, once and in order, then what follows live; one
// whose sequence the history no longer holds gets a gap first.
func TestHistoryRecovery(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	a := startHistoryMachine(t, "a", ns.ClientURL(), &HistoryOptions{MaxPerTopic: 5})
	b := startHistoryMachine(t, "b", ns.ClientURL(), &HistoryOptions{MaxPerTopic: 5})
	ca := a.connect(t, 1)[0]
	ca.send(t, a, "join:room")
	publish(t, a, "room", "one")
	publish(t, b, "room", "two")
	waitSays(t, ca, "room#1 one", "room#2 two")
	ca.conn.Close(gust.StatusGoingAway, "")
	<-ca.done

	publish(t, b, "room", "three")
	publish(t, b, "other", "x")
	publish(t, a, "room", "four")

	cb := b.connect(t, 1)[0]
	cb.send(t, b, "since:room:2")
	waitSays(t, cb, "room#3 three", "room#5 four", "room recovered 5")
	publish(t, a, "room", "five")
	waitSays(t, cb, "room#3 three", "room#5 four", "room recovered 5", "room#6 five")

	// The history keeps 5 per topic: 2..6 of room; 1 is gone.
	for i := range 2 {
		publish(t, a, "room", "more"+strconv.Itoa(i))
	}
	cg := a.connect(t, 1)[0]
	cg.send(t, a, "since:room:2")
	waitSays(t, cg, "room gap 2", "room#3 three", "room#5 four", "room#6 five", "room#7 more0", "room#8 more1", "room recovered 8")

}

// A recovery longer than a direct-get batch comes whole and in order.
func TestHistoryRecoversManyBatches(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	a := startHistoryMachine(t, "a", ns.ClientURL(), nil)
	n := 2*historyBatch + 10
	for i := range n {
		publish(t, a, "big", strconv.Itoa(i))
	}
	c := a.connect(t, 1)[0]
	c.send(t, a, "since:big:0")
	waitFor(t, "the whole history", func() bool { return int(c.n.Load()) >= n+1 })
	got := c.says(t)
	require.Len(t, got, n+1)
	for i := range n {
		require.Equal(t, fmt.Sprintf("big#%d %d", i+1, i), got[i])
	}
	require.Equal(t, fmt.Sprintf("big recovered %d", n), got[n])
}

// A file-stored history survives a NATS server restart; a message handed
// over during the outage is stored once the instance is back; an instance
// that missed messages while its connection was down fetches them when the
// next one tells of them.
func TestHistoryAcrossNATSRestart(t *testing.T) {
	dir := t.TempDir()
	ns := startJetStream(t, 0, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	a := startHistoryMachine(t, "a", ns.ClientURL(), nil)
	b := startHistoryMachine(t, "b", ns.ClientURL(), nil)
	ca, cb := a.connect(t, 1)[0], b.connect(t, 1)[0]
	ca.send(t, a, "join:room")
	cb.send(t, b, "join:room")
	publish(t, a, "room", "before")
	waitSays(t, cb, "room#1 before")

	ns.Shutdown()
	ns.WaitForShutdown()
	wait(t, a.disconnected, "a to notice")
	wait(t, b.disconnected, "b to notice")
	a.dialer.close() // a stays away a while longer
	// Hub.Publish hands the message over and returns: a's broker keeps it
	// while a is away, and stores it once a is back.
	require.NoError(t, a.hub.Publish("room", gust.OpText, []byte("during")))
	startJetStream(t, port, dir) // the same port and store: the history is back
	wait(t, b.reconnected, "b to reconnect")
	publish(t, b, "room", "after restart") // a is still away: it misses this one live
	a.dialer.open()
	wait(t, a.reconnected, "a to reconnect")
	waitSays(t, cb, "room#1 before", "room#2 after restart", "room#3 during")
	publish(t, b, "room", "last")
	waitSays(t, cb, "room#1 before", "room#2 after restart", "room#3 during", "room#4 last")
	waitSays(t, ca, "room#1 before", "room#2 after restart", "room#3 during", "room#4 last")

	cn := b.connect(t, 1)[0]
	cn.send(t, b, "since:room:1")
	waitSays(t, cn, "room#2 after restart", "room#3 during", "room#4 last", "room recovered 4")
}

// A client that recovers on an instance whose NATS connection was away,
// before the instance has repaired the topic for its other subscribers,
// does not get the repaired messages a second time.
func TestHistoryRecoveryBeforeRepair(t *testing.T) {
	dir := t.TempDir()
	ns := startJetStream(t, 0, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	a := startHistoryMachine(t, "a", ns.ClientURL(), nil)
	b := startHistoryMachine(t, "b", ns.ClientURL(), nil)
	cb := b.connect(t, 1)[0]
	cb.send(t, b, "join:room")
	publish(t, a, "room", "one")
	waitSays(t, cb, "room#1 one")

	// b's connection to NATS breaks and stays down while a publishes.
	ns.Shutdown()
	ns.WaitForShutdown()
	wait(t, a.disconnected, "a to notice")
	wait(t, b.disconnected, "b to notice")
	b.dialer.close()
	startJetStream(t, port, dir)
	wait(t, a.reconnected, "a to reconnect")
	publish(t, a, "room", "two")
	publish(t, a, "room", "three")
	b.dialer.open()
	wait(t, b.reconnected, "b to reconnect")

	// A client that saw 1 comes back to b: it recovers 2 and 3.
	cn := b.connect(t, 1)[0]
	cn.send(t, b, "since:room:1")
	waitSays(t, cn, "room#2 two", "room#3 three", "room recovered 3")

	// The next message tells b that it missed 2 and 3: b repairs them for
	// cb, and must not send them to cn again.
	publish(t, a, "room", "four")
	waitSays(t, cb, "room#1 one", "room#2 two", "room#3 three", "room#4 four")
	waitSays(t, cn, "room#2 two", "room#3 three", "room recovered 3", "room#4 four")
}

// The NATS server comes back on an empty store while the instances run:
// the stream is made again with a new epoch, the members of the room are
// told to start over before the first message numbered anew, and a client
// that kept a position of the old epoch is told so and gets the new
// history.
func TestHistoryHubAcrossEmptyStore(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	port := ns.Addr().(*net.TCPAddr).Port
	a := startHistoryMachine(t, "a", ns.ClientURL(), nil)
	b := startHistoryMachine(t, "b", ns.ClientURL(), nil)
	ca, cb := a.connect(t, 1)[0], b.connect(t, 1)[0]
	ca.send(t, a, "since:room:0")
	cb.send(t, b, "since:room:0")
	waitSays(t, ca, "room recovered 0") // the recovery is over: what follows is live
	waitSays(t, cb, "room recovered 0")
	publish(t, a, "room", "one")
	waitSays(t, ca, "room recovered 0", "room#1 one")
	waitSays(t, cb, "room recovered 0", "room#1 one")
	e1 := a.broker.(*HistoryBroker).Epoch()

	ns.Shutdown()
	ns.WaitForShutdown()
	wait(t, a.disconnected, "a to notice")
	wait(t, b.disconnected, "b to notice")
	startJetStream(t, port, t.TempDir())
	wait(t, a.reconnected, "a to reconnect")
	wait(t, b.reconnected, "b to reconnect")
	publish(t, a, "room", "two")
	publish(t, b, "room", "three")
	waitSays(t, ca, "room recovered 0", "room#1 one", "room reset", "room#1 two", "room#2 three")
	waitSays(t, cb, "room recovered 0", "room#1 one", "room reset", "room#1 two", "room#2 three")
	require.NotEqual(t, e1, b.broker.(*HistoryBroker).Epoch())

	cn := b.connect(t, 1)[0]
	cn.send(t, b, "since:room:"+e1+":1")
	waitSays(t, cn, "room reset", "room#1 two", "room#2 three", "room recovered 2")
}
