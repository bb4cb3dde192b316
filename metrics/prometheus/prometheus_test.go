package prometheus

import (
	"errors"
	"testing"

	"github.com/gustws/gust"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Each hook method moves its metric; the names pass Prometheus' own lint.
func TestCollectorCounts(t *testing.T) {
	reg := prom.NewRegistry()
	c, err := New(reg)
	require.NoError(t, err)

	c.Handshake(101)
	c.Handshake(403)
	c.Handshake(418) // a status not resolved ahead of time
	c.Opened(nil)
	c.Opened(nil)
	c.Received(nil, gust.OpText, 100, 40)
	c.Sent(nil, gust.OpBinary, 10, 10)
	c.Queued(nil, 3)
	c.Queued(nil, -1)
	c.Dropped(nil, 2)
	c.Closed(nil, gust.StatusNormalClosure, "peer")
	c.Closed(nil, 4321, "local")
	c.Netpoll(nil, "fallback-fd")
	c.Netpoll(nil, "blocked")
	c.Netpoll(nil, "blocked")
	c.Netpoll(nil, "something new")

	require.Equal(t, 1.0, testutil.ToFloat64(c.handshakes.WithLabelValues("101")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.handshakes.WithLabelValues("403")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.handshakes.WithLabelValues("418")))
	require.Equal(t, 0.0, testutil.ToFloat64(c.handshakes.WithLabelValues("400")))
	require.Equal(t, 2.0, testutil.ToFloat64(c.opened))
	require.Equal(t, 0.0, testutil.ToFloat64(c.active))
	require.Equal(t, 1.0, testutil.ToFloat64(c.closed.WithLabelValues("peer", "1000")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.closed.WithLabelValues("local", "4xxx")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.received[gust.OpText]))
	require.Equal(t, 0.0, testutil.ToFloat64(c.received[gust.OpBinary]))
	require.Equal(t, 1.0, testutil.ToFloat64(c.sent[gust.OpBinary]))
	require.Equal(t, 100.0, testutil.ToFloat64(c.receivedBytes))
	require.Equal(t, 40.0, testutil.ToFloat64(c.receivedWire))
	require.Equal(t, 10.0, testutil.ToFloat64(c.sentBytes))
	require.Equal(t, 10.0, testutil.ToFloat64(c.sentWire))
	require.Equal(t, 2.0, testutil.ToFloat64(c.outboxWaiting))
	require.Equal(t, 3.0, testutil.ToFloat64(c.outboxQueued))
	require.Equal(t, 2.0, testutil.ToFloat64(c.outboxDropped))
	require.Equal(t, 1.0, testutil.ToFloat64(c.netpoll.WithLabelValues("fallback-fd")))
	require.Equal(t, 0.0, testutil.ToFloat64(c.netpoll.WithLabelValues("fallback-type")))
	require.Equal(t, 2.0, testutil.ToFloat64(c.netpoll.WithLabelValues("blocked")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.netpoll.WithLabelValues("something new")))
	var m gust.Metrics = c
	_, ok := m.(interface{ Netpoll(*gust.Conn, string) })
	require.True(t, ok, "the optional method gust looks for")

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems, "Prometheus naming conventions")
}

// A second Collector on the same registry is refused, and registers
// nothing; two on registerers wrapped with a label of the same name are not.
func TestCollectorRegistration(t *testing.T) {
	reg := prom.NewRegistry()
	_, err := New(reg)
	require.NoError(t, err)
	_, err = New(reg)
	var are prom.AlreadyRegisteredError
	require.True(t, errors.As(err, &are), "%v", err)
	_, err = New(prom.WrapRegistererWith(prom.Labels{"side": "client"}, reg))
	require.Error(t, err, "the label names differ from the first's")

	reg = prom.NewRegistry()
	server, err := New(prom.WrapRegistererWith(prom.Labels{"side": "server"}, reg))
	require.NoError(t, err)
	client, err := New(prom.WrapRegistererWith(prom.Labels{"side": "client"}, reg))
	require.NoError(t, err)
	server.Opened(nil)
	client.Opened(nil)
	client.Opened(nil)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "gust_connections_opened_total" {
			require.Len(t, f.GetMetric(), 2)
			for _, m := range f.GetMetric() {
				want := map[string]float64{"server": 1, "client": 2}[m.GetLabel()[0].GetValue()]
				require.Equal(t, want, m.GetCounter().GetValue())
			}
		}
	}
}

// The hot paths allocate nothing.
func TestCollectorDoesNotAllocate(t *testing.T) {
	c, err := New(prom.NewRegistry())
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		c.Received(nil, gust.OpText, 10, 5)
		c.Sent(nil, gust.OpBinary, 10, 5)
		c.Queued(nil, 1)
		c.Queued(nil, -1)
		c.Dropped(nil, 1)
		c.Handshake(101)
		c.Opened(nil)
		c.Netpoll(nil, "blocked")
	})
	require.Zero(t, allocs)
}
