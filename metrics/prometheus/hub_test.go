package prometheus

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A scrape of a HubCollector reads the Hub's counters, its history's and
// its presence's, under names that pass Prometheus' lint.
func TestHubCollectorScrape(t *testing.T) {
	history := hub.NewMemoryHistory(nil)
	h, err := hub.New(&hub.Options{Broker: history})
	require.NoError(t, err)
	defer h.Close()
	presence := hub.NewLocalPresence()
	defer presence.Close()
	reg := prom.NewRegistry()
	_, err = NewHub(reg, h, presence)
	require.NoError(t, err)

	require.NoError(t, h.Publish("room", gust.OpText, []byte(`{"text":"kept"}`)))
	require.NoError(t, h.Publish("other", gust.OpText, []byte(`{"text":"kept too"}`)))
	require.NoError(t, presence.Join("room", "alice"))
	require.NoError(t, presence.Join("room", "bob"))
	require.NoError(t, presence.Join("other", "alice"))

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	page := string(body)
	for _, line := range []string{
		"gust_hub_history_records 2",
		"gust_hub_history_topics 2",
		"gust_hub_presence_members 3",
		"gust_hub_presence_topics 2",
		"gust_hub_recoveries_total 0",
		`gust_hub_gaps_total{reset="true"} 0`,
		"gust_hub_pending 0",
	} {
		require.Contains(t, page, line+"\n")
	}
	require.Contains(t, page, "gust_hub_history_bytes ")
	require.False(t, strings.Contains(page, "gust_hub_history_bytes 0\n"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
