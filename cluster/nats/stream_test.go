package gustnats

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
)

// testBroker is a HistoryBroker on a NATS connection of its own that
// reconnects at once and tells when it did.
type testBroker struct {
	*HistoryBroker
	nc           *nats.Conn
	disconnected chan struct{}
	reconnected  chan struct{}
}

func newTestBroker(t testing.TB, url string, opts *HistoryOptions) *testBroker {
	t.Helper()
	tb := &testBroker{disconnected: make(chan struct{}, 16), reconnected: make(chan struct{}, 16)}
	nc, err := nats.Connect(url,
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { tb.disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { tb.reconnected <- struct{}{} }),
	)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	o := HistoryOptions{}
	if opts != nil {
		o = *opts
	}
	o.Subject = "test.hub"
	tb.nc = nc
	tb.HistoryBroker, err = NewHistory(context.Background(), nc, &o)
	require.NoError(t, err)
	t.Cleanup(func() { tb.Close() })
	return tb
}

// records subscribes to topic's records; each arrives with a copy of its
// message.
func records(t *testing.T, b *testBroker, topic string) chan hub.Record {
	t.Helper()
	ch := make(chan hub.Record, 1024)
	in, err := b.SubscribeHistory(func(r hub.Record) {
		r.Msg = append([]byte(nil), r.Msg...)
		ch <- r
	})
	require.NoError(t, err)
	t.Cleanup(in.Unsubscribe)
	require.NoError(t, in.Add(topic))
	require.NoError(t, b.nc.Flush())
	return ch
}

func nextRecord(t *testing.T, ch chan hub.Record) hub.Record {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for a record")
		return hub.Record{}
	}
}

// rec is what a test compares of a record: its message, epoch and sequence.
type rec struct {
	Msg   string
	Epoch string
	Seq   uint64
}

func recOf(r hub.Record) rec { return rec{string(r.Msg), r.Epoch, r.Seq} }

// history reads the whole of topic's history.
func history(t *testing.T, b *testBroker, topic string) []rec {
	t.Helper()
	var got []rec
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, b.History(ctx, topic, 0, func(r hub.Record) error {
		got = append(got, recOf(r))
		return nil
	}))
	return got
}

// result is what a PublishAsync's done got.
type result struct {
	pos hub.Position
	err error
}

func publishAsync(t *testing.T, b *testBroker, topic, msg string) chan result {
	t.Helper()
	ch := make(chan result, 1)
	require.NoError(t, b.PublishAsync(topic, []byte(msg), "", func(pos hub.Position, err error) { ch <- result{pos, err} }))
	return ch
}

func waitResult(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for done")
		return result{}
	}
}

// stopNATS shuts ns down and waits until every broker has noticed.
func stopNATS(t *testing.T, ns interface{ Shutdown() }, bs ...*testBroker) {
	t.Helper()
	ns.Shutdown()
	for _, b := range bs {
		wait(t, b.disconnected, "the broker to notice")
	}
}

// The NATS server comes back without the stream (a new, empty store; a
// history kept in memory) while the instance runs: the instance makes the
// stream again, with a new epoch, and carries on. PublishAsync and Publish
// store again, the records a SubscribeHistory handler gets and those
// History reads carry the new epoch.
func TestHistoryStreamComesBackEmpty(t *testing.T) {
	for _, tc := range []struct {
		name   string
		memory bool
	}{{"a new store", false}, {"a memory history", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ns := startJetStream(t, 0, dir)
			port := ns.Addr().(*net.TCPAddr).Port
			b := newTestBroker(t, ns.ClientURL(), &HistoryOptions{Memory: tc.memory})
			recs := records(t, b, "room")
			e1 := b.Epoch()
			require.NotEmpty(t, e1)
			require.NoError(t, b.Publish("room", []byte("one")))
			require.Equal(t, rec{"one", e1, 1}, recOf(nextRecord(t, recs)))

			stopNATS(t, ns, b)
			if !tc.memory {
				dir = t.TempDir()
			}
			startJetStream(t, port, dir)

			two := waitResult(t, publishAsync(t, b, "room", "two"))
			require.NoError(t, two.err)
			e2 := b.Epoch()
			require.NotEqual(t, e1, e2, "the stream made again has a new epoch")
			require.Equal(t, hub.Position{Epoch: e2, Seq: 1}, two.pos)
			require.NoError(t, b.Publish("room", []byte("three")))

			require.Equal(t, rec{"two", e2, 1}, recOf(nextRecord(t, recs)))
			require.Equal(t, rec{"three", e2, 2}, recOf(nextRecord(t, recs)))
			require.Equal(t, []rec{{"two", e2, 1}, {"three", e2, 2}}, history(t, b, "room"))
		})
	}
}

// The NATS server restarts with its store: the stream and its epoch are
// the same, the sequences go on.
func TestHistoryStreamKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ns := startJetStream(t, 0, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	b := newTestBroker(t, ns.ClientURL(), nil)
	recs := records(t, b, "room")
	e1 := b.Epoch()
	require.NoError(t, b.Publish("room", []byte("one")))
	require.Equal(t, rec{"one", e1, 1}, recOf(nextRecord(t, recs)))

	checks := b.checks.Load()
	stopNATS(t, ns, b)
	startJetStream(t, port, dir)
	wait(t, b.reconnected, "the broker to reconnect")
	waitFor(t, "the broker to look the stream up", func() bool { return b.checks.Load() > checks })
	require.Equal(t, e1, b.Epoch())

	two := waitResult(t, publishAsync(t, b, "room", "two"))
	require.NoError(t, two.err)
	require.Equal(t, hub.Position{Epoch: e1, Seq: 2}, two.pos)
	require.Equal(t, rec{"two", e1, 2}, recOf(nextRecord(t, recs)))
	require.Equal(t, []rec{{"one", e1, 1}, {"two", e1, 2}}, history(t, b, "room"))
}

// The stream is deleted while every instance stays connected; one instance
// publishes and makes it again. Another, which neither publishes nor
// reconnects, learns the new epoch from JetStream's advisory, and its
// SubscribeHistory handler gets the new stream's records with it, even
// when their sequence is past the last one it saw (so that only the
// advisory tells).
func TestHistoryEpochFromAnotherInstance(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	a := newTestBroker(t, ns.ClientURL(), nil)
	b := newTestBroker(t, ns.ClientURL(), nil)
	recs := records(t, b, "room")
	e1 := a.Epoch()
	require.Equal(t, e1, b.Epoch())
	require.NoError(t, a.Publish("room", []byte("x")))
	require.Equal(t, rec{"x", e1, 1}, recOf(nextRecord(t, recs)))

	js, err := jetstream.New(a.nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(context.Background(), "TEST_HUB"))

	require.NoError(t, a.Publish("other", []byte("o1")), "a makes the stream again")
	e2 := a.Epoch()
	require.NotEqual(t, e1, e2)
	waitFor(t, "b to learn the new epoch", func() bool { return b.Epoch() == e2 })

	require.NoError(t, a.Publish("room", []byte("y")))
	require.Equal(t, rec{"y", e2, 2}, recOf(nextRecord(t, recs)))
	require.Equal(t, []rec{{"y", e2, 2}}, history(t, b, "room"))
}

// History finds the stream gone: it makes it again, and reads the new,
// empty, history under the new epoch.
func TestHistoryReadMakesStreamAgain(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	b := newTestBroker(t, ns.ClientURL(), nil)
	e1 := b.Epoch()
	require.NoError(t, b.Publish("room", []byte("one")))
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(context.Background(), "TEST_HUB"))

	require.Empty(t, history(t, b, "room"))
	require.NotEqual(t, e1, b.Epoch())
	_, err = js.Stream(context.Background(), "TEST_HUB")
	require.NoError(t, err, "the stream is there again")
}

// orderOf collects the order in which dones are called.
type orderOf struct {
	mu  sync.Mutex
	ids []int
	res []result
}

func (o *orderOf) done(id int) func(hub.Position, error) {
	return func(pos hub.Position, err error) {
		o.mu.Lock()
		o.ids = append(o.ids, id)
		o.res = append(o.res, result{pos, err})
		o.mu.Unlock()
	}
}

func (o *orderOf) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ids)
}
