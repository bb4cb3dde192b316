package main

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// Every topic is held by one instance and published by one; what an
// instance publishes spreads over every instance's block.
func TestPlacement(t *testing.T) {
	for _, c := range []struct{ topics, instances int }{{1000, 4}, {100, 4}, {10, 3}, {5, 1}} {
		holder := map[string]int{}
		publisher := map[string]int{}
		for i := range c.instances {
			p := placement{topics: c.topics, instances: c.instances, instance: i}
			for _, tp := range p.held() {
				_, dup := holder[tp]
				require.False(t, dup, "%s held twice", tp)
				holder[tp] = i
			}
			for _, tp := range p.published() {
				_, dup := publisher[tp]
				require.False(t, dup, "%s published twice", tp)
				publisher[tp] = i
			}
		}
		require.Len(t, holder, c.topics)
		require.Len(t, publisher, c.topics)
		for i := range c.instances {
			p := placement{topics: c.topics, instances: c.instances, instance: i}
			homes := map[int]int{}
			for _, tp := range p.published() {
				homes[holder[tp]]++
			}
			if c.topics >= c.instances*c.instances {
				require.Len(t, homes, c.instances, "instance %d publishes to every block", i)
			}
		}
	}
}

// route all hands the Hub every topic's messages, route interest only
// those of the topics it added; own_in counts the held topics' and
// PublishAll's either way.
func TestRouteBrokers(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	defer s.Shutdown()

	for _, route := range []string{"all", "interest"} {
		t.Run(route, func(t *testing.T) {
			nc, err := nats.Connect(s.ClientURL())
			require.NoError(t, err)
			defer nc.Close()
			pub, err := nats.Connect(s.ClientURL())
			require.NoError(t, err)
			defer pub.Close()

			rc := newRouteCounter([]string{"t0"})
			b, err := newBroker(route, gustnats.New(nc, route), rc)
			require.NoError(t, err)
			got := make(chan string, 16)
			handler := func(topic string, _ []byte) { got <- topic }
			if ib, ok := b.(hub.InterestBroker); ok {
				require.Equal(t, "interest", route)
				in, err := ib.SubscribeInterest(handler)
				require.NoError(t, err)
				defer in.Unsubscribe()
				require.NoError(t, in.Add("t0"))
				require.NoError(t, nc.Flush())
			} else {
				require.Equal(t, "all", route)
				unsub, err := b.Subscribe(handler)
				require.NoError(t, err)
				defer unsub()
			}
			other := gustnats.New(pub, route)
			for _, tp := range []string{"t1", "t0", "t2", ""} {
				require.NoError(t, other.Publish(tp, []byte("m")))
			}
			want := []string{"t0", ""}
			if route == "all" {
				want = []string{"t1", "t0", "t2", ""}
			}
			for _, w := range want {
				select {
				case tp := <-got:
					require.Equal(t, w, tp)
				case <-time.After(5 * time.Second):
					t.Fatalf("no message for %q", w)
				}
			}
			require.NoError(t, nc.Flush())
			require.Equal(t, uint64(len(want)), nc.Stats().InMsgs)
			require.Equal(t, uint64(2), rc.ownIn.Load())
		})
	}
	_, err = newBroker("some", nil, nil)
	require.Error(t, err)
}
