package gustnats

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
)

// send sends a command to m's server, waits for its answer, and flushes m's
// NATS connection: the subscription it made or ended has reached the server.
func (c *client) send(t *testing.T, m *machine, cmd string) {
	t.Helper()
	require.NoError(t, c.conn.WriteString(cmd))
	select {
	case ack := <-c.acks:
		require.Equal(t, "ok:"+cmd, ack)
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer to %q", cmd)
	}
	require.NoError(t, m.nc.Flush())
}

// inMsgs returns how many messages NATS has delivered to each machine's
// connection, after a flush of each: whatever the server had queued for a
// machine before the flush is counted.
func inMsgs(t *testing.T, ms ...*machine) []uint64 {
	t.Helper()
	var n []uint64
	for _, m := range ms {
		require.NoError(t, m.nc.Flush())
		n = append(n, m.nc.Stats().InMsgs)
	}
	return n
}

func since(now, before []uint64) []uint64 {
	d := make([]uint64, len(now))
	for i := range now {
		d[i] = now[i] - before[i]
	}
	return d
}

// Three instances: NATS delivers a topic's messages to the instances with
// subscribers to it and to no other, per-user topics (escaped subjects) and
// topic "" included; PublishAll reaches every instance; an instance's
// interest ends when its last subscriber leaves or closes.
func TestInterestRouting(t *testing.T) {
	ns := startNATS(t, 0)
	a := startMachine(t, "a", ns.ClientURL())
	b := startMachine(t, "b", ns.ClientURL())
	c := startMachine(t, "c", ns.ClientURL())
	ca := a.connect(t, 2)
	cb := b.connect(t, 2)
	cc := c.connect(t, 1)
	ca[0].send(t, a, "join:t-a")
	ca[1].send(t, a, "join:t-a")
	cb[0].send(t, b, "join:t-b")
	cb[1].send(t, b, "join:user:bob")
	cb[1].send(t, b, "join:") // topic "" shares PublishAll's subject
	start := inMsgs(t, a, b, c)

	const n = 100
	var want []string
	for i := range n {
		msg := fmt.Sprintf("t-b %d", i)
		require.NoError(t, c.hub.Publish("t-b", gust.OpText, []byte(msg)))
		want = append(want, msg)
	}
	require.NoError(t, c.hub.Publish("t-a", gust.OpText, []byte("to a")))
	require.NoError(t, c.hub.Publish("user:bob", gust.OpText, []byte("to bob")))
	require.NoError(t, c.hub.Publish("", gust.OpText, []byte("to empty")))
	require.NoError(t, c.hub.Publish("nobody", gust.OpText, []byte("lost")))
	require.NoError(t, a.hub.Publish("t-a", gust.OpText, []byte("from a")))

	waitFor(t, "t-b's messages", func() bool { return cb[0].n.Load() == n })
	waitFor(t, "bob's messages", func() bool { return cb[1].n.Load() == 2 })
	for _, x := range ca {
		waitFor(t, "t-a's messages", func() bool { return x.n.Load() == 2 })
	}
	// a: "to a" and its own "from a" (NATS echoes it: a has interest);
	// b: t-b, user:bob and ""; c: none of its topics. Topic "" travels on
	// PublishAll's subject, so it reaches every instance (and the Hubs
	// without subscribers to it drop it).
	require.Equal(t, []uint64{2 + 1, n + 2, 0 + 1}, since(inMsgs(t, a, b, c), start))
	require.Equal(t, want, cb[0].messages())
	require.Equal(t, []string{"to bob", "to empty"}, cb[1].messages())
	for _, x := range ca {
		require.ElementsMatch(t, []string{"to a", "from a"}, x.messages()) // two publishers: no order between them
	}
	require.Empty(t, cc[0].messages())

	// b's interest in t-b ends when its subscriber leaves, in user:bob and
	// "" when bob's connection closes; "room" stays (cb[0] is in it).
	cb[0].send(t, b, "leave:t-b")
	require.NoError(t, cb[1].conn.Close(gust.StatusNormalClosure, ""))
	<-cb[1].done
	waitFor(t, "bob to leave", func() bool { return b.hub.Stats().Topics == 1 })
	start = inMsgs(t, a, b, c)
	require.NoError(t, c.hub.Publish("t-b", gust.OpText, []byte("t-b after")))
	require.NoError(t, c.hub.Publish("user:bob", gust.OpText, []byte("bob after")))
	require.NoError(t, c.hub.PublishAll(gust.OpText, []byte("all")))
	for _, x := range []*client{ca[0], ca[1], cb[0], cc[0]} {
		waitFor(t, "PublishAll", func() bool { m := x.messages(); return len(m) > 0 && m[len(m)-1] == "all" })
	}
	require.Equal(t, []uint64{1, 1, 1}, since(inMsgs(t, a, b, c), start), "PublishAll only")
	require.Equal(t, append(want, "all"), cb[0].messages())
	require.Equal(t, []string{"all"}, cc[0].messages())
}

// Topics joined and left while an instance is cut off from NATS: nats.go
// subscribes again on reconnect to what the Hub has interest in, and only
// to that.
func TestInterestAcrossReconnect(t *testing.T) {
	ns := startNATS(t, 0)
	port := ns.Addr().(*net.TCPAddr).Port
	a := startMachine(t, "a", ns.ClientURL())
	b := startMachine(t, "b", ns.ClientURL())
	cb := b.connect(t, 1)
	cb[0].send(t, b, "join:gone")

	b.dialer.close()
	ns.Shutdown()
	ns.WaitForShutdown()
	wait(t, b.disconnected, "b to notice")
	wait(t, a.disconnected, "a to notice")
	require.NoError(t, cb[0].conn.WriteString("join:late"))
	require.Equal(t, "ok:join:late", <-cb[0].acks)
	require.NoError(t, cb[0].conn.WriteString("leave:gone"))
	require.Equal(t, "ok:leave:gone", <-cb[0].acks)

	startNATS(t, port)
	wait(t, a.reconnected, "a to reconnect")
	b.dialer.open()
	wait(t, b.reconnected, "b to reconnect")
	require.NoError(t, b.nc.Flush())
	start := inMsgs(t, b)
	require.NoError(t, a.hub.Publish("gone", gust.OpText, []byte("not for b")))
	require.NoError(t, a.hub.Publish("late", gust.OpText, []byte("late")))
	require.NoError(t, a.hub.Publish("room", gust.OpText, []byte("room")))
	waitFor(t, "late and room", func() bool { return cb[0].n.Load() == 2 })
	require.Equal(t, []string{"late", "room"}, cb[0].messages())
	require.Equal(t, []uint64{2}, since(inMsgs(t, b), start))
}
