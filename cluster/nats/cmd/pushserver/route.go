package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// placement spreads topics t0..t<topics-1> over instances processes: this
// process, instance, holds the block [instance*topics/instances,
// (instance+1)*topics/instances), whose subscribers all connect to it, and
// publishes the topics t with t mod instances == instance, which lie in
// every block: of what it publishes, about (instances-1)/instances is for
// topics held elsewhere.
type placement struct {
	topics, instances, instance int
}

func topicName(t int) string { return "t" + strconv.Itoa(t) }

// held returns the topics whose subscribers connect to this instance.
func (p placement) held() []string {
	var ts []string
	for t := p.instance * p.topics / p.instances; t < (p.instance+1)*p.topics/p.instances; t++ {
		ts = append(ts, topicName(t))
	}
	return ts
}

// published returns the topics this instance publishes to, in an order
// shuffled once per instance, so that its messages within a round go to
// every block in turn rather than to one block after another.
func (p placement) published() []string {
	var ts []string
	for t := p.instance; t < p.topics; t += p.instances {
		ts = append(ts, topicName(t))
	}
	r := rand.New(rand.NewPCG(uint64(p.instance), 27))
	r.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	return ts
}

// routeCounter counts the messages the Broker hands the Hub that are for
// the process's own topics: those it holds, and PublishAll's (topic "").
type routeCounter struct {
	own   map[string]bool
	ownIn atomic.Uint64
}

func newRouteCounter(held []string) *routeCounter {
	rc := &routeCounter{own: make(map[string]bool, len(held)+1)}
	rc.own[""] = true
	for _, t := range held {
		rc.own[t] = true
	}
	return rc
}

func (rc *routeCounter) wrap(handler func(topic string, msg []byte)) func(string, []byte) {
	return func(topic string, msg []byte) {
		if rc.own[topic] {
			rc.ownIn.Add(1)
		}
		handler(topic, msg)
	}
}

// allBroker is the cluster/nats Broker as it was before it routed by
// interest: it has only hub.Broker's methods, so the Hub subscribes with
// Subscribe, to every subject, and NATS brings it the whole cluster's
// traffic.
type allBroker struct {
	b  *gustnats.Broker
	rc *routeCounter
}

func (a allBroker) Publish(topic string, msg []byte) error { return a.b.Publish(topic, msg) }

func (a allBroker) Subscribe(handler func(topic string, msg []byte)) (func(), error) {
	return a.b.Subscribe(a.rc.wrap(handler))
}

// interestBroker is the Broker as it is, a hub.InterestBroker: NATS brings
// the Hub the messages of the topics it has subscribers to.
type interestBroker struct{ allBroker }

func (i interestBroker) SubscribeInterest(handler func(topic string, msg []byte)) (hub.Interest, error) {
	return i.b.SubscribeInterest(i.rc.wrap(handler))
}

// newBroker returns b for route "interest" or wrapped as allBroker for
// "all", either counting through rc.
func newBroker(route string, b *gustnats.Broker, rc *routeCounter) (hub.Broker, error) {
	switch route {
	case "interest":
		return interestBroker{allBroker{b, rc}}, nil
	case "all":
		return allBroker{b, rc}, nil
	}
	return nil, fmt.Errorf("-route %q: want interest or all", route)
}

// joiner subscribes the process's connections to its held topics in turn,
// the k-th connection to open to held[k mod len(held)], so the clients
// spread evenly over the topics whatever their number.
type joiner struct {
	h    *hub.Hub
	held []string
	next atomic.Uint64
}

func (j *joiner) join(c *gust.Conn) {
	if len(j.held) == 0 {
		return
	}
	t := j.held[(j.next.Add(1)-1)%uint64(len(j.held))]
	if err := j.h.Subscribe(c, t); err != nil {
		log.Printf("pushserver: subscribing a connection to %s: %v", t, err)
	}
}

// publishTopics publishes rounds rounds (0: until ctx ends): in round seq,
// message(seq, size) once to each topic, spread evenly over interval, so
// that every client receives one message per interval, numbered 1, 2, ...
// published counts the messages Publish took.
func publishTopics(ctx context.Context, h *hub.Hub, topics []string, rounds uint64, interval time.Duration, size int, published *atomic.Uint64) {
	if len(topics) == 0 {
		return
	}
	tick := time.NewTicker(max(interval/time.Duration(len(topics)), time.Microsecond))
	defer tick.Stop()
	for seq := uint64(1); rounds == 0 || seq <= rounds; seq++ {
		msg := message(seq, size)
		for i, t := range topics {
			if seq > 1 || i > 0 {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
			if err := h.Publish(t, gust.OpText, msg); err != nil {
				log.Printf("pushserver: message %d to %s: %v", seq, t, err)
				continue
			}
			published.Add(1)
		}
	}
}
