package gustnats

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
)

// PublishAsync returns while the NATS server is away: the calls below
// return before the server is started again, or the test would never
// start it. Once it is back, every message is stored, done is called in
// the order of hand-over, and each topic's messages are stored in order.
func TestHistoryPublishAsyncDuringOutage(t *testing.T) {
	dir := t.TempDir()
	ns := startJetStream(t, 0, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	b := newTestBroker(t, ns.ClientURL(), &HistoryOptions{PublishTimeout: time.Minute})
	e1 := b.Epoch()
	stopNATS(t, ns, b)

	const n = 30
	var o orderOf
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range n {
			if err := b.PublishAsync(fmt.Sprint("room", i%3), []byte(fmt.Sprint(i)), "", o.done(i)); err != nil {
				t.Error(err)
			}
		}
	}()
	wait(t, returned, "PublishAsync to return with the server down")
	require.Zero(t, o.len(), "nothing is stored while the server is down")

	startJetStream(t, port, dir)
	waitFor(t, "every done", func() bool { return o.len() == n })
	last := map[string]uint64{}
	for i, id := range o.ids {
		require.Equal(t, i, id, "done in the order of hand-over")
		r := o.res[i]
		require.NoError(t, r.err)
		require.Equal(t, e1, r.pos.Epoch)
		topic := fmt.Sprint("room", id%3)
		require.Greater(t, r.pos.Seq, last[topic], "a topic's messages stored in order")
		last[topic] = r.pos.Seq
	}
	for topic := range last {
		got := history(t, b, topic)
		require.Len(t, got, n/3)
		for i, r := range got {
			require.Equal(t, fmt.Sprint(3*i+int(topic[len(topic)-1]-'0')), r.Msg)
		}
	}
}

// PublishQueue bounds what PublishAsync holds: past it, PublishAsync and
// Publish return ErrQueueFull at once; what it took is stored once the
// server is back, and it takes more then.
func TestHistoryPublishQueueBound(t *testing.T) {
	dir := t.TempDir()
	ns := startJetStream(t, 0, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	b := newTestBroker(t, ns.ClientURL(), &HistoryOptions{PublishQueue: 4, PublishTimeout: time.Minute})
	stopNATS(t, ns, b)

	var o orderOf
	for i := range 4 {
		require.NoError(t, b.PublishAsync("room", []byte(fmt.Sprint(i)), "", o.done(i)))
	}
	require.ErrorIs(t, b.PublishAsync("room", []byte("over"), "", o.done(4)), ErrQueueFull)
	require.ErrorIs(t, b.Publish("room", []byte("over")), ErrQueueFull)

	startJetStream(t, port, dir)
	waitFor(t, "every done", func() bool { return o.len() == 4 })
	require.Equal(t, []int{0, 1, 2, 3}, o.ids)
	for _, r := range o.res {
		require.NoError(t, r.err)
	}
	require.NoError(t, b.Publish("room", []byte("4")))
	require.Len(t, history(t, b, "room"), 5)
}

// A message the server does not take within PublishTimeout is reported
// failed, in order, and the queue takes messages again.
func TestHistoryPublishTimeout(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	b := newTestBroker(t, ns.ClientURL(), &HistoryOptions{PublishTimeout: 200 * time.Millisecond})
	stopNATS(t, ns, b)
	var o orderOf
	for i := range 3 {
		require.NoError(t, b.PublishAsync("room", []byte(fmt.Sprint(i)), "", o.done(i)))
	}
	waitFor(t, "every done", func() bool { return o.len() == 3 })
	require.Equal(t, []int{0, 1, 2}, o.ids)
	for _, r := range o.res {
		require.ErrorIs(t, r.err, errNotSent)
	}
	require.Zero(t, b.queued.Load())
}

// Close reports what PublishAsync still holds as failed, in order, and
// PublishAsync and Publish refuse what follows; closing the NATS
// connection does the same.
func TestHistoryCloseReportsPending(t *testing.T) {
	for _, how := range []string{"Close", "nats.Conn.Close"} {
		t.Run(how, func(t *testing.T) {
			ns := startJetStream(t, 0, t.TempDir())
			b := newTestBroker(t, ns.ClientURL(), &HistoryOptions{PublishTimeout: time.Minute})
			stopNATS(t, ns, b)
			var o orderOf
			for i := range 3 {
				require.NoError(t, b.PublishAsync("room", []byte(fmt.Sprint(i)), "", o.done(i)))
			}
			if how == "Close" {
				require.NoError(t, b.Close())
			} else {
				b.nc.Close()
				wait(t, b.stopped, "the broker's goroutine to end")
			}
			require.Equal(t, []int{0, 1, 2}, o.ids)
			for _, r := range o.res {
				require.ErrorIs(t, r.err, ErrClosed)
			}
			require.ErrorIs(t, b.PublishAsync("room", nil, "", nil), ErrClosed)
			require.ErrorIs(t, b.Publish("room", nil), ErrClosed)
		})
	}
}

// BenchmarkHistoryPublish stores small messages on the in-process server:
// Publish one at a time, PublishAsync to one topic (one message in flight
// per topic) and spread over 64 topics (up to 256 in flight).
func BenchmarkHistoryPublish(b *testing.B) {
	for _, bc := range []struct {
		name   string
		async  bool
		topics int
	}{{"Publish", false, 1}, {"PublishAsync/1-topic", true, 1}, {"PublishAsync/64-topics", true, 64}} {
		b.Run(bc.name, func(b *testing.B) {
			ns := startJetStream(b, 0, b.TempDir())
			tb := newTestBroker(b, ns.ClientURL(), nil)
			msg := make([]byte, 100)
			topics := make([]string, bc.topics)
			for i := range topics {
				topics[i] = fmt.Sprint("room", i)
			}
			slots := make(chan struct{}, defaultPublishQueue)
			done := func(_ hub.Position, err error) {
				if err != nil {
					b.Error(err)
				}
				<-slots
			}
			b.ResetTimer()
			for i := range b.N {
				topic := topics[i%len(topics)]
				if !bc.async {
					if err := tb.Publish(topic, msg); err != nil {
						b.Fatal(err)
					}
					continue
				}
				slots <- struct{}{}
				if err := tb.PublishAsync(topic, msg, "", done); err != nil {
					b.Fatal(err)
				}
			}
			for range cap(slots) {
				slots <- struct{}{}
			}
			b.StopTimer()
		})
	}
}

// A message handed over again with the same id within the duplicate window
// is stored once, and both get its position, from this broker or another
// instance's (a page that resends through another instance after its
// first one died).
func TestHistoryPublishAsyncSameID(t *testing.T) {
	ns := startJetStream(t, 0, t.TempDir())
	a := newTestBroker(t, ns.ClientURL(), nil)
	b := newTestBroker(t, ns.ClientURL(), nil)
	send := func(tb *testBroker, id, msg string) hub.Position {
		t.Helper()
		ch := make(chan result, 1)
		require.NoError(t, tb.PublishAsync("room", []byte(msg), id, func(pos hub.Position, err error) { ch <- result{pos, err} }))
		r := waitResult(t, ch)
		require.NoError(t, r.err)
		return r.pos
	}
	first := send(a, "alice-1", "hello")
	require.Equal(t, first, send(a, "alice-1", "hello"))
	require.Equal(t, first, send(b, "alice-1", "hello"), "through another instance")
	second := send(b, "alice-2", "again")
	require.Greater(t, second.Seq, first.Seq)
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.History(ctx, "room", 0, func(r hub.Record) error {
		got = append(got, string(r.Msg))
		return nil
	}))
	require.Equal(t, []string{"hello", "again"}, got)
}
