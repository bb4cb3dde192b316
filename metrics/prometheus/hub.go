package prometheus

import (
	"github.com/gustws/gust/hub"
	prom "github.com/prometheus/client_golang/prometheus"
)

// HubCollector exports a [hub.Hub]'s counters ([hub.Stats]), read at each
// scrape, and those of a Presence that reports them (hub.LocalPresence
// does). Make one with [NewHub]. Its metrics:
//
//	gust_hub_delivered_total          messages the Hub wrote to a connection
//	gust_hub_dropped_total            messages meant for a connection and never written to it
//	gust_hub_closed_slow_total        connections closed as slow (gust.OutboxCloseSlow)
//	gust_hub_pending                  the Hub's messages in outboxes now (a gauge)
//	gust_hub_connections              connections the Hub holds now
//	gust_hub_topics                   topics with a subscriber now
//	gust_hub_recoveries_total         recoveries started (Hub.SubscribeSince)
//	gust_hub_gaps_total{reset}        gap notices sent: "false", some messages no longer kept;
//	                                  "true", told to start over (another epoch, a position past
//	                                  the history's end, the history started over)
//	gust_hub_history_records          messages the history keeps (MemoryHistory), and
//	gust_hub_history_bytes            the bytes they count for (MaxBytes), and
//	gust_hub_history_topics           the topics they are in
//	gust_hub_presence_members         members of the Presence, once per topic, and
//	gust_hub_presence_topics          its topics with members
//
// Like the connection metrics, give the collectors of two Hubs in one
// registry a label each (prometheus.WrapRegistererWith).
type HubCollector struct {
	hub      *hub.Hub
	presence interface{ Stats() hub.PresenceStats }

	delivered, dropped, closedSlow, pending, conns, topics *prom.Desc
	recoveries, gaps                                       *prom.Desc
	historyRecords, historyBytes, historyTopics            *prom.Desc
	presenceMembers, presenceTopics                        *prom.Desc
}

// NewHub registers a HubCollector for h on reg (nil: the default
// registerer). presence, if not nil and it reports its counts (a
// hub.LocalPresence), adds its metrics.
func NewHub(reg prom.Registerer, h *hub.Hub, presence hub.Presence) (*HubCollector, error) {
	if reg == nil {
		reg = prom.DefaultRegisterer
	}
	desc := func(name, help string, labels ...string) *prom.Desc {
		return prom.NewDesc("gust_hub_"+name, help, labels, nil)
	}
	c := &HubCollector{
		hub:             h,
		delivered:       desc("delivered_total", "Messages the Hub wrote to a connection."),
		dropped:         desc("dropped_total", "Messages meant for a connection and never written to it."),
		closedSlow:      desc("closed_slow_total", "Connections the Hub's messages overflowed, closed as slow."),
		pending:         desc("pending", "The Hub's messages in connection outboxes now."),
		conns:           desc("connections", "Connections the Hub holds now."),
		topics:          desc("topics", "Topics with at least one subscriber now."),
		recoveries:      desc("recoveries_total", "Recoveries started (Hub.SubscribeSince)."),
		gaps:            desc("gaps_total", "Gap notices sent; reset=\"true\": told to start over.", "reset"),
		historyRecords:  desc("history_records", "Messages the history keeps."),
		historyBytes:    desc("history_bytes", "Bytes the history's messages count for."),
		historyTopics:   desc("history_topics", "Topics with messages in the history."),
		presenceMembers: desc("presence_members", "Members of the Presence, once per topic."),
		presenceTopics:  desc("presence_topics", "Topics with members in the Presence."),
	}
	if ps, ok := presence.(interface{ Stats() hub.PresenceStats }); ok {
		c.presence = ps
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *HubCollector) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{c.delivered, c.dropped, c.closedSlow, c.pending, c.conns, c.topics,
		c.recoveries, c.gaps, c.historyRecords, c.historyBytes, c.historyTopics} {
		ch <- d
	}
	if c.presence != nil {
		ch <- c.presenceMembers
		ch <- c.presenceTopics
	}
}

// Collect implements prometheus.Collector: one Hub.Stats call a scrape.
func (c *HubCollector) Collect(ch chan<- prom.Metric) {
	st := c.hub.Stats()
	counter := func(d *prom.Desc, v uint64, labels ...string) {
		ch <- prom.MustNewConstMetric(d, prom.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prom.Desc, v float64) {
		ch <- prom.MustNewConstMetric(d, prom.GaugeValue, v)
	}
	counter(c.delivered, st.Delivered)
	counter(c.dropped, st.Dropped)
	counter(c.closedSlow, st.ClosedSlow)
	gauge(c.pending, float64(st.Pending))
	gauge(c.conns, float64(st.Connections))
	gauge(c.topics, float64(st.Topics))
	counter(c.recoveries, st.Recoveries)
	counter(c.gaps, st.Gaps-st.Resets, "false")
	counter(c.gaps, st.Resets, "true")
	gauge(c.historyRecords, float64(st.History.Records))
	gauge(c.historyBytes, float64(st.History.Bytes))
	gauge(c.historyTopics, float64(st.History.Topics))
	if c.presence != nil {
		ps := c.presence.Stats()
		gauge(c.presenceMembers, float64(ps.Members))
		gauge(c.presenceTopics, float64(ps.Topics))
	}
}
