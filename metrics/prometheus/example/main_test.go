package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// The example server, started on loopback, counts what a few clients do,
// and /metrics shows it to a scrape over HTTP.
func TestScrapeMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s, err := newServer()
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.http.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	wsURL := "ws://" + ln.Addr().String() + "/ws"

	// A request that is not a handshake is refused with 400.
	resp, err := http.Get(base + "/ws")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// Three clients: one echoes compressible text and closes, one echoes
	// binary and closes, one leaves without a close frame.
	text := strings.Repeat("prometheus ", 500)
	for i, how := range []string{"text", "binary", "leave"} {
		in := &client{messages: make(chan *gust.Message, 4), closed: make(chan error, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := gust.Dial(ctx, wsURL, in, &gust.DialOptions{Options: gust.Options{
			Compression: gust.CompressionOptions{Enabled: true}}})
		cancel()
		require.NoError(t, err, "client %d", i)
		go c.ReadLoop()
		switch how {
		case "text":
			for range 3 {
				require.NoError(t, c.WriteString(text))
				m := in.wait(t)
				require.Equal(t, text, string(m.Data))
				m.Close()
			}
			require.NoError(t, c.Close(gust.StatusNormalClosure, ""))
		case "binary":
			require.NoError(t, c.WriteMessage(gust.OpBinary, []byte{1, 2, 3}))
			in.wait(t).Close()
			require.NoError(t, c.Close(4001, "done"))
		case "leave":
			require.NoError(t, c.CloseNow())
		}
		<-in.closed
	}

	// The server counts each close before OnClose; the client may see its
	// end first: scrape until the three closes are there.
	var families map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		families = scrape(t, base+"/metrics")
		return sum(families["gust_connections_closed_total"], nil) == 3
	}, 10*time.Second, 10*time.Millisecond)

	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f := families[name]
		require.NotNil(t, f, "metric %s is missing", name)
		return sum(f, labels)
	}
	require.Equal(t, 3.0, value("gust_handshakes_total", map[string]string{"status": "101"}))
	require.Equal(t, 1.0, value("gust_handshakes_total", map[string]string{"status": "400"}))
	require.Equal(t, 0.0, value("gust_handshakes_total", map[string]string{"status": "403"}), "present at 0")
	require.Equal(t, 3.0, value("gust_connections_opened_total", nil))
	require.Equal(t, 0.0, value("gust_connections_active", nil))
	require.Equal(t, 1.0, value("gust_connections_closed_total", map[string]string{"cause": "peer", "code": "1000"}))
	require.Equal(t, 1.0, value("gust_connections_closed_total", map[string]string{"cause": "peer", "code": "4xxx"}))
	require.Equal(t, 1.0, value("gust_connections_closed_total", map[string]string{"cause": "io", "code": "1006"}))
	require.Equal(t, 3.0, value("gust_messages_received_total", map[string]string{"type": "text"}))
	require.Equal(t, 1.0, value("gust_messages_received_total", map[string]string{"type": "binary"}))
	require.Equal(t, 3.0, value("gust_messages_sent_total", map[string]string{"type": "text"}))
	require.Equal(t, 1.0, value("gust_messages_sent_total", map[string]string{"type": "binary"}))
	payload := float64(3*len(text) + 3)
	require.Equal(t, payload, value("gust_received_bytes_total", nil))
	require.Equal(t, payload, value("gust_sent_bytes_total", nil))
	require.Less(t, value("gust_received_wire_bytes_total", nil), payload/4, "compressed on the wire")
	require.Less(t, value("gust_sent_wire_bytes_total", nil), payload/4, "compressed on the wire")
	require.Equal(t, 0.0, value("gust_outbox_messages", nil))
	require.Equal(t, 0.0, value("gust_outbox_dropped_total", nil))
	require.NotNil(t, families["go_goroutines"], "the runtime's metrics are there too")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.shutdown(ctx))
	require.True(t, errors.Is(<-served, http.ErrServerClosed))
}

// scrape GETs url and parses the text exposition format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// sum adds the values of the series of f whose labels include labels.
func sum(f *dto.MetricFamily, labels map[string]string) float64 {
	if f == nil {
		return 0
	}
	total := 0.0
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

// client hands its messages and its end to the test.
type client struct {
	gust.BuiltinEventHandler
	messages chan *gust.Message
	closed   chan error
}

func (c *client) OnMessage(_ *gust.Conn, m *gust.Message) { c.messages <- m }
func (c *client) OnClose(_ *gust.Conn, err error)         { c.closed <- err }

func (c *client) wait(t *testing.T) *gust.Message {
	t.Helper()
	select {
	case m := <-c.messages:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no echo")
		return nil
	}
}
