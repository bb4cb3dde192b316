// Package gustnats is a hub.Broker (github.com/gustws/gust/hub) on NATS
// (github.com/nats-io/nats.go): the Hubs of several processes, each with a
// Broker on its own NATS connection, fan out to each other's WebSocket
// connections.
//
//	nc, err := nats.Connect("nats://127.0.0.1:4222", nats.MaxReconnects(-1))
//	...
//	h, err := hub.New(&hub.Options{Broker: gustnats.New(nc, "")})
//
// A message published on one Hub reaches the connections of every Hub once:
// the publishing Hub delivers to its own connections at once and ignores the
// copy NATS brings back. Messages from one Hub reach the other Hubs in the
// order they were published (one NATS connection, one queue).
//
// # Routing by interest
//
// The Broker is a hub.InterestBroker: a Hub subscribes in NATS to the
// subject of each topic that has local subscribers, from its first
// subscriber's Hub.Subscribe until its last one leaves, and to one subject
// for PublishAll. The cost model: a Hub.Publish is one NATS message into
// the server and one out to each instance whose Hub has subscribers to the
// topic (the publisher included when it has some, unless its connection
// has nats.NoEcho(), which the Hub does not need), so N instances with
// interest cost N deliveries, and an instance receives its own topics'
// traffic, not the cluster's; a PublishAll (and a Publish to topic "",
// which shares its subject) is one out to every instance. A topic's
// subscription reaches the NATS server just after Hub.Subscribe returns: a
// message published elsewhere in that moment does not reach the new
// subscriber. Subjects and the message format are those of the earlier
// Broker, which subscribed every Hub to subject.>, so instances of both
// versions work together (the earlier ones still receive everything).
//
// # History and recovery
//
// [NewHistory] makes a [HistoryBroker] instead: a JetStream stream numbers
// and keeps each topic's messages, so that a client that reconnects to any
// instance gets what it missed (hub.Hub.SubscribeSince), and an instance
// whose NATS connection broke fetches what it did not receive. A position
// in the history is the stream's epoch ([HistoryBroker.Epoch], its
// creation time) and a sequence: when the NATS server loses the stream,
// the instances make it again, with a new epoch, and a client that kept a
// position of the old one is told to start over.
// [HistoryBroker.PublishAsync] never waits for NATS: it queues, and reports
// later. README.md has the cost model, each failure and the knobs of all
// three parts.
//
// # When the NATS server goes away
//
// NATS core stores nothing. While a Hub's connection to NATS is down, its
// local connections still get what it publishes, and nats.go reconnects by
// itself (nats.MaxReconnects, nats.ReconnectWait). What the Hub publishes in
// the meantime is buffered by nats.go, up to nats.ReconnectBufSize (8 MiB by
// default), and sent once it has reconnected: the other Hubs get those
// messages only if they have reconnected (and so subscribed again) before it
// — a Hub that reconnects later misses them, and a Hub never gets what was
// published while it was itself away. Past the buffer, or with
// nats.ReconnectBufSize(-1), Hub.Publish returns the error
// (nats.ErrReconnectBufExceeded) and the message reaches the local
// connections only. The tests show each case.
//
// # Presence
//
// [NewPresence] makes a hub.Presence on the same NATS server: who is in a
// topic across the instances, with join and leave events; the members of
// an instance that dies without a word leave after an expiry, so no ghost
// stays. Its subjects lie below a prefix of their own (gust.presence), apart
// from the Broker's; [Presence] tells what it costs and what each failure
// does.
package gustnats

import (
	"encoding/base64"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust/hub"
)

// DefaultSubject is the subject prefix New uses for "".
const DefaultSubject = "gust.hub"

// Broker publishes a Hub's messages to NATS and delivers those of the other
// Hubs. It implements hub.Broker.
type Broker struct {
	nc     *nats.Conn
	prefix string
}

// New returns a Broker on nc whose messages travel on subjects below
// subject (DefaultSubject when ""): subject.<topic> for a topic made only of
// letters, digits, '-' and '_', subject.~<base64url of the topic> for any
// other (and subject.~ for PublishAll). Hubs that should reach each other
// use the same subject. The caller keeps nc and closes it.
func New(nc *nats.Conn, subject string) *Broker {
	if subject == "" {
		subject = DefaultSubject
	}
	return &Broker{nc: nc, prefix: subject + "."}
}

var _ hub.InterestBroker = (*Broker)(nil)

// Publish sends msg on the topic's subject.
func (b *Broker) Publish(topic string, msg []byte) error {
	return b.nc.Publish(b.prefix+encodeTopic(topic), msg)
}

// Subscribe calls handler, from nats.go's delivery goroutine, for every
// message published below the Broker's subject, whatever its topic (a Hub
// uses SubscribeInterest instead). It returns once the NATS server has the
// subscription (or after 5 s, or at once while disconnected).
func (b *Broker) Subscribe(handler func(topic string, msg []byte)) (func(), error) {
	sub, err := b.nc.Subscribe(b.prefix+">", func(m *nats.Msg) {
		topic, ok := decodeTopic(strings.TrimPrefix(m.Subject, b.prefix))
		if ok {
			handler(topic, m.Data)
		}
	})
	if err != nil {
		return nil, err
	}
	// Wait until the server has the subscription, so that what is published
	// after Subscribe returns reaches handler. While disconnected this fails:
	// nats.go subscribes again when it reconnects.
	b.nc.FlushTimeout(5 * time.Second)
	return func() {
		// It fails only when the connection or the subscription has
		// closed already: nothing is left to stop then.
		sub.Unsubscribe()
	}, nil
}

// queueSize bounds the messages NATS has handed a SubscribeInterest
// subscription and its handler has not yet taken: past it, nats.go drops
// them and reports nats.ErrSlowConsumer to the connection's ErrorHandler.
// 65,536 pointers: 512 KiB per subscription.
const queueSize = 1 << 16

// allToken is the subject token of PublishAll's messages (topic "" with the
// all flag, and Hub.Publish to topic "", told apart by the Hub's envelope).
var allToken = encodeTopic("")

// SubscribeInterest calls handler, from a goroutine of its own, with the
// messages published with PublishAll, and with those of each topic from
// the returned Interest's Add until its Remove: a NATS subscription to
// the topic's subject for each such topic, and one to subject.~. The
// subscriptions share one queue, so the messages of one publishing Hub
// reach handler in the order they were published, whatever their topics.
//
// It returns once the NATS server has the subscription to subject.~ (or
// after 5 s, or at once while disconnected); Add and Remove do not wait
// for the server. nats.go subscribes again to every subject when it
// reconnects, and Add and Remove may be called while it is disconnected.
func (b *Broker) SubscribeInterest(handler func(topic string, msg []byte)) (hub.Interest, error) {
	return subscribeInterest(b.nc, b.prefix, func(topic string, m *nats.Msg) { handler(topic, m.Data) }, nil)
}

// aside is a subject outside the topics' whose messages an interest takes
// in its queue, in order with the topics', and hands to f.
type aside struct {
	subject string
	f       func(m *nats.Msg)
}

// subscribeInterest subscribes to prefix+"~" (and to aside's subject when
// not nil) and returns the Interest that subscribes to prefix+<topic> for
// each topic it adds, calling handle with each message and its topic from a
// goroutine of its own.
func subscribeInterest(nc *nats.Conn, prefix string, handle func(topic string, m *nats.Msg), aside *aside) (*interest, error) {
	in := &interest{nc: nc, prefix: prefix, aside: aside, ch: make(chan *nats.Msg, queueSize), done: make(chan struct{}), subs: make(map[string]*nats.Subscription)}
	all, err := nc.ChanSubscribe(prefix+allToken, in.ch)
	if err != nil {
		return nil, err
	}
	in.subs[allToken] = all
	if aside != nil {
		if in.asideSub, err = nc.ChanSubscribe(aside.subject, in.ch); err != nil {
			all.Unsubscribe()
			return nil, err
		}
	}
	go in.run(handle)
	nc.FlushTimeout(5 * time.Second)
	return in, nil
}

// interest is a SubscribeInterest subscription: its NATS subscriptions by
// subject token, all feeding ch, which run drains until done closes.
type interest struct {
	nc       *nats.Conn
	prefix   string
	aside    *aside
	asideSub *nats.Subscription
	onClose  func() // called by Unsubscribe, when not nil
	ch       chan *nats.Msg
	done     chan struct{}

	mu     sync.Mutex
	subs   map[string]*nats.Subscription
	closed bool
}

func (in *interest) run(handle func(topic string, m *nats.Msg)) {
	for {
		select {
		case <-in.done:
			return
		case m := <-in.ch:
			select {
			case <-in.done: // Unsubscribe returned: no more calls
				return
			default:
			}
			rest, ok := strings.CutPrefix(m.Subject, in.prefix)
			if !ok {
				if in.aside != nil && m.Subject == in.aside.subject {
					in.aside.f(m)
				}
				continue
			}
			if topic, ok := decodeTopic(rest); ok {
				handle(topic, m)
			}
		}
	}
}

// Add subscribes to topic's subject. Topic "" shares PublishAll's subject,
// to which the subscription always listens.
func (in *interest) Add(topic string) error {
	tok := encodeTopic(topic)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.subs[tok] != nil {
		return nil
	}
	sub, err := in.nc.ChanSubscribe(in.prefix+tok, in.ch)
	if err != nil {
		return err
	}
	in.subs[tok] = sub
	return nil
}

// Remove unsubscribes from topic's subject.
func (in *interest) Remove(topic string) {
	tok := encodeTopic(topic)
	if tok == allToken {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if sub := in.subs[tok]; sub != nil {
		// It fails only when the connection has closed: nothing is left
		// to stop then.
		sub.Unsubscribe()
		delete(in.subs, tok)
	}
}

// Unsubscribe ends every subscription; handler is not called again once it
// has returned, except by the call under way.
func (in *interest) Unsubscribe() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return
	}
	in.closed = true
	for _, sub := range in.subs {
		sub.Unsubscribe()
	}
	clear(in.subs)
	if in.asideSub != nil {
		in.asideSub.Unsubscribe()
	}
	if in.onClose != nil {
		in.onClose()
	}
	close(in.done)
}

// encodeTopic makes a topic one NATS subject token: itself when it is
// plain, else "~" and its base64url form, which has only token characters.
func encodeTopic(topic string) string {
	if plainToken(topic) {
		return topic
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(topic))
}

func decodeTopic(token string) (string, bool) {
	enc, ok := strings.CutPrefix(token, "~")
	if !ok {
		return token, plainToken(token)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	return string(b), err == nil
}

func plainToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
