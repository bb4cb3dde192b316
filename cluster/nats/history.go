package gustnats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gustws/gust/hub"
)

// HistoryOptions configures NewHistory. A nil *HistoryOptions means the
// defaults.
type HistoryOptions struct {
	// Subject is the subject prefix, as New's: messages are stored from
	// subject.h.<topic> and delivered on subject.r.<topic>. Default:
	// DefaultSubject.
	Subject string
	// Stream names the JetStream stream that keeps the history; it is
	// created, or updated to these options, by NewHistory. Default: the
	// subject in capitals with '.' as '_' (GUST_HUB).
	Stream string
	// MaxPerTopic bounds the messages kept per topic. Default 1,000.
	MaxPerTopic int64
	// MaxAge bounds how long a message is kept. Default 24 h.
	MaxAge time.Duration
	// MaxBytes bounds the whole history; past it the oldest messages of
	// all topics go first. Default 1 GiB.
	MaxBytes int64
	// Memory keeps the history in the NATS server's memory instead of on
	// disk: faster, and lost when the server restarts. Default false.
	Memory bool
	// Replicas is the stream's replica count in a NATS cluster. Default 1.
	Replicas int
	// PublishTimeout bounds Publish, which retries while the NATS server
	// is away (the same message ID each time, so the stream keeps one
	// copy). Default 10 s.
	PublishTimeout time.Duration
}

// HistoryBroker is a hub.HistoryBroker on NATS JetStream: a Hub publishes
// into a stream that numbers and keeps each topic's messages; the stream
// republishes each stored message, with its sequence and the sequence of
// the topic's message before it, to the subject that the Hubs with
// subscribers to the topic listen to, as Broker does.
//
// The cost model: a Hub.Publish is one request to the stream and its
// acknowledgement, one write to the stream's store, and one NATS message
// out to each instance with subscribers to the topic (the publisher's
// included: with history every Hub delivers what the stream brings, so all
// instances deliver a topic in one order). A recovery
// (hub.Hub.SubscribeSince) is one direct-get request per 256 messages
// recovered.
//
// What happens when things fail:
//   - An instance dies: its clients reconnect to another and pass the last
//     sequence they saw to SubscribeSince; they miss nothing the history
//     still holds (MaxPerTopic, MaxAge, MaxBytes).
//   - An instance's connection to NATS breaks: nats.go reconnects and
//     subscribes again; the first message of a topic after the break tells
//     (by its previous sequence) what the instance missed, and the Hub
//     fetches it from the history before delivering it.
//   - The NATS server restarts: Publish retries for PublishTimeout, with
//     one message ID, so a message is stored once; a file-stored history
//     (the default) survives the restart.
//   - Publish fails (the timeout passes): the message may or may not have
//     been stored, the error says so; no connection got it from this Hub.
type HistoryBroker struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	prefix  string // subject + "."
	stream  string
	timeout time.Duration
	id      string // message IDs: id-counter
	n       atomic.Uint64
}

// NewHistory returns a HistoryBroker on nc, creating or updating its
// stream (which needs a NATS server with JetStream enabled). The caller
// keeps nc and closes it.
func NewHistory(ctx context.Context, nc *nats.Conn, opts *HistoryOptions) (*HistoryBroker, error) {
	var o HistoryOptions
	if opts != nil {
		o = *opts
	}
	if o.Subject == "" {
		o.Subject = DefaultSubject
	}
	if o.Stream == "" {
		o.Stream = strings.ToUpper(strings.ReplaceAll(o.Subject, ".", "_"))
	}
	setDefault(&o.MaxPerTopic, 1000)
	setDefault(&o.MaxAge, 24*time.Hour)
	setDefault(&o.MaxBytes, 1<<30)
	setDefault(&o.Replicas, 1)
	setDefault(&o.PublishTimeout, 10*time.Second)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	prefix := o.Subject + "."
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              o.Stream,
		Description:       "gust hub history",
		Subjects:          []string{prefix + "h.*"},
		MaxMsgsPerSubject: o.MaxPerTopic,
		MaxAge:            o.MaxAge,
		MaxBytes:          o.MaxBytes,
		Storage:           storage,
		Replicas:          o.Replicas,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
		RePublish:         &jetstream.RePublish{Source: prefix + "h.*", Destination: prefix + "r.{{wildcard(1)}}"},
	})
	if err != nil {
		return nil, fmt.Errorf("gustnats: the history stream %s: %w", o.Stream, err)
	}
	var id [6]byte
	rand.Read(id[:])
	return &HistoryBroker{nc: nc, js: js, prefix: prefix, stream: o.Stream, timeout: o.PublishTimeout, id: hex.EncodeToString(id[:])}, nil
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

var _ hub.HistoryBroker = (*HistoryBroker)(nil)

// Publish stores msg in the topic's history, and returns once the stream
// has it, retrying for PublishTimeout while the NATS server is away.
func (b *HistoryBroker) Publish(topic string, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	m := nats.NewMsg(b.prefix + "h." + encodeTopic(topic))
	m.Data = msg
	m.Header.Set(jetstream.MsgIDHeader, b.id+"-"+strconv.FormatUint(b.n.Add(1), 10))
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
		_, err := b.js.PublishMsg(attempt, m, jetstream.WithRetryAttempts(0))
		cancelAttempt()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gustnats: storing the message (it may have been stored): %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Subscribe calls handler, from nats.go's delivery goroutine, with every
// message stored below the subject, whatever its topic (a Hub uses
// SubscribeHistory instead).
func (b *HistoryBroker) Subscribe(handler func(topic string, msg []byte)) (func(), error) {
	prefix := b.prefix + "r."
	sub, err := b.nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		if topic, ok := decodeTopic(strings.TrimPrefix(m.Subject, prefix)); ok {
			handler(topic, m.Data)
		}
	})
	if err != nil {
		return nil, err
	}
	b.nc.FlushTimeout(5 * time.Second)
	return func() { sub.Unsubscribe() }, nil
}

// SubscribeInterest is SubscribeHistory for a handler without sequences.
func (b *HistoryBroker) SubscribeInterest(handler func(topic string, msg []byte)) (hub.Interest, error) {
	return b.SubscribeHistory(func(r hub.Record) { handler(r.Topic, r.Msg) })
}

// SubscribeHistory calls handler, from a goroutine of its own, with each
// stored message of PublishAll and of the topics the Interest adds, as
// SubscribeInterest does for Broker, with its sequence.
func (b *HistoryBroker) SubscribeHistory(handler func(hub.Record)) (hub.Interest, error) {
	return subscribeInterest(b.nc, b.prefix+"r.", func(topic string, m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		prev, _ := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
		handler(hub.Record{Topic: topic, Seq: seq, Prev: prev, Msg: m.Data})
	})
}

// historyBatch is how many messages one direct-get request asks for.
const historyBatch = 256

// History calls f with the stored messages of topic from sequence since
// on, in order, reading them with JetStream's direct get, historyBatch at
// a time. It first flushes the connection, so that the subscriptions the
// Hub made before it are in place at the server.
func (b *HistoryBroker) History(ctx context.Context, topic string, since uint64, f func(hub.Record) error) error {
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return err
	}
	subject := b.prefix + "h." + encodeTopic(topic)
	next := max(since, 1)
	for {
		more, last, err := b.historyBatch(ctx, topic, subject, next, f)
		if err != nil || !more {
			return err
		}
		next = last + 1
	}
}

// historyBatch reads one batch from next on, and reports whether more
// remain and the last sequence read.
func (b *HistoryBroker) historyBatch(ctx context.Context, topic, subject string, next uint64, f func(hub.Record) error) (more bool, last uint64, err error) {
	req, _ := json.Marshal(directGet{Seq: next, NextBySubject: subject, Batch: historyBatch})
	inbox := b.nc.NewInbox()
	sub, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		return false, 0, err
	}
	defer sub.Unsubscribe()
	if err := b.nc.PublishRequest("$JS.API.DIRECT.GET."+b.stream, inbox, req); err != nil {
		return false, 0, err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return false, last, err
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "404": // nothing from next on
			return false, last, nil
		case "204": // the batch's end
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return pending > 0 && last > 0, last, nil
		default:
			return false, last, fmt.Errorf("gustnats: reading the history: %s %s", status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return false, last, fmt.Errorf("gustnats: reading the history: a message without its sequence")
		}
		if err := f(hub.Record{Topic: topic, Seq: seq, Msg: m.Data}); err != nil {
			return false, last, err
		}
		last = seq
	}
}

// directGet is JetStream's direct-get request.
type directGet struct {
	Seq           uint64 `json:"seq,omitempty"`
	NextBySubject string `json:"next_by_subj,omitempty"`
	Batch         int    `json:"batch,omitempty"`
}
