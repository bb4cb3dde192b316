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
// order they were published (one NATS connection, one subscription).
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
package gustnats

import (
	"encoding/base64"
	"strings"
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

var _ hub.Broker = (*Broker)(nil)

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

// Publish sends msg on the topic's subject.
func (b *Broker) Publish(topic string, msg []byte) error {
	return b.nc.Publish(b.prefix+encodeTopic(topic), msg)
}

// Subscribe calls handler, from nats.go's delivery goroutine, for every
// message published below the Broker's subject. It returns once the NATS
// server has the subscription (or after 5 s, or at once while
// disconnected).
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
