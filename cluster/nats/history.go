package gustnats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	// created, or updated to these options, by NewHistory, and made again
	// with them when the NATS server comes back without it. Default: the
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
	// disk: faster, and lost when the server restarts (the stream is made
	// again, with a new epoch). Default false.
	Memory bool
	// Replicas is the stream's replica count in a NATS cluster. Default 1.
	Replicas int
	// PublishTimeout bounds how long a message is tried, from its
	// PublishAsync (or Publish) on: it is sent again while the NATS server
	// is away or the stream is being made again (the same message ID each
	// time, so the stream keeps one copy), then reported failed. Default
	// 10 s.
	PublishTimeout time.Duration
	// PublishQueue bounds the messages handed to PublishAsync (and
	// Publish) and not yet reported: past it PublishAsync returns
	// ErrQueueFull. What it holds is copies of the messages: 4,096 chat
	// messages of 1 KiB are 4 MiB. Default 4,096.
	PublishQueue int
	// DuplicateWindow is how long the stream remembers the ID of a message
	// it stored: a message with the same ID within it is not stored again
	// (JetStream's Duplicates; a Hub's PublishOnce passes the client's
	// message ID). Default 2 min.
	DuplicateWindow time.Duration
}

// HistoryBroker is a hub.HistoryBroker on NATS JetStream: a Hub publishes
// into a stream that numbers and keeps each topic's messages; the stream
// republishes each stored message, with its sequence and the sequence of
// the topic's message before it, to the subject that the Hubs with
// subscribers to the topic listen to, as Broker does. Every record carries
// the stream's epoch (Epoch), which changes when the stream is made anew.
//
// The cost model: a Hub.Publish is one message to the stream and its
// acknowledgement (up to 256 in flight: PublishAsync), one write to the
// stream's store, and one NATS message out to each instance with
// subscribers to the topic (the publisher's included: with history every
// Hub delivers what the stream brings, so all instances deliver a topic in
// one order). A recovery (hub.Hub.SubscribeSince) is one direct-get
// request per 256 messages recovered. The epoch costs no request per
// message: a look-up of the stream when something says it changed (Epoch).
//
// NewHistory starts one goroutine, which sends what PublishAsync queues
// and keeps the stream and its epoch up to date; Close ends it, and so does
// closing the NATS connection. All methods may be called concurrently.
//
// What happens when things fail:
//   - An instance dies: its clients reconnect to another and pass the
//     position they kept (epoch and sequence) to SubscribeSince; they miss
//     nothing the history still holds (MaxPerTopic, MaxAge, MaxBytes).
//   - An instance's connection to NATS breaks: nats.go reconnects and
//     subscribes again; the first message of a topic after the break tells
//     (by its previous sequence) what the instance missed, and the Hub
//     fetches it from the history before delivering it. Meanwhile
//     PublishAsync queues (PublishQueue) and returns at once.
//   - The NATS server restarts with its store: messages are sent again
//     under their message ID until PublishTimeout, so each is stored once;
//     the stream and its epoch are unchanged.
//   - The NATS server comes back without the stream (an empty store, a
//     memory-stored history, the stream deleted): each instance looks the
//     stream up when it reconnects, and a publish or a History that finds
//     it gone makes it again, with these options and a new epoch; the
//     others learn the epoch from JetStream's advisory. The messages of
//     before are lost: a client whose position names the old epoch is told
//     to start over.
//   - A message is not stored within PublishTimeout: done (or Publish)
//     gets the error; the message may have been stored anyway; no
//     connection got it from this Hub.
type HistoryBroker struct {
	nc          *nats.Conn
	js          jetstream.JetStream
	cfg         jetstream.StreamConfig
	prefix      string // subject + "."
	stream      string
	timeout     time.Duration
	id          string // message IDs: id-token
	replyPrefix string // acknowledgements: replyPrefix + token

	epoch    atomic.Pointer[string]
	streamMu sync.Mutex    // serialises looks and makes of the stream
	checks   atomic.Uint64 // looks and makes that succeeded (read by tests)

	queueMax int64
	queued   atomic.Int64 // taken by PublishAsync, not yet reported
	queue    chan *pending
	closeMu  sync.RWMutex // PublishAsync holds it for reading
	closed   bool

	in      chan *nats.Msg   // acknowledgements and advisories
	status  chan nats.Status // CONNECTED, CLOSED
	subs    []*nats.Subscription
	ctx     context.Context // ends with Close
	cancel  context.CancelFunc
	stopped chan struct{} // closed when run has returned
}

// NewHistory returns a HistoryBroker on nc, creating or updating its
// stream (which needs a NATS server with JetStream enabled), and starts
// its goroutine. The caller keeps nc and closes it; Close, or closing nc,
// stops the broker.
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
	setDefault(&o.PublishQueue, defaultPublishQueue)
	setDefault(&o.DuplicateWindow, 2*time.Minute)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	prefix := o.Subject + "."
	cfg := jetstream.StreamConfig{
		Name:              o.Stream,
		Description:       "gust hub history",
		Subjects:          []string{prefix + "h.*"},
		MaxMsgsPerSubject: o.MaxPerTopic,
		MaxAge:            o.MaxAge,
		MaxBytes:          o.MaxBytes,
		Storage:           storage,
		Replicas:          o.Replicas,
		Discard:           jetstream.DiscardOld,
		Duplicates:        o.DuplicateWindow,
		AllowDirect:       true,
		RePublish:         &jetstream.RePublish{Source: prefix + "h.*", Destination: prefix + "r.{{wildcard(1)}}"},
	}
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("gustnats: the history stream %s: %w", o.Stream, err)
	}
	var id [6]byte
	rand.Read(id[:])
	b := &HistoryBroker{
		nc: nc, js: js, cfg: cfg, prefix: prefix, stream: o.Stream, timeout: o.PublishTimeout,
		id: hex.EncodeToString(id[:]), replyPrefix: nc.NewInbox() + ".",
		queueMax: int64(o.PublishQueue), queue: make(chan *pending, o.PublishQueue),
		in: make(chan *nats.Msg, inSize), stopped: make(chan struct{}),
	}
	b.setEpoch(s.CachedInfo().Created)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	for _, subject := range []string{b.replyPrefix + "*", b.advisorySubject()} {
		sub, err := nc.ChanSubscribe(subject, b.in)
		if err != nil {
			for _, s := range b.subs {
				s.Unsubscribe()
			}
			b.cancel()
			return nil, err
		}
		b.subs = append(b.subs, sub)
	}
	b.status = nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	// The advisory reaches this instance only once the server has the
	// subscription.
	nc.FlushTimeout(5 * time.Second)
	go b.run()
	return b, nil
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

var _ hub.HistoryBroker = (*HistoryBroker)(nil)

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
// SubscribeInterest does for Broker, with its sequence and epoch.
//
// The epoch a record carries is the one this subscription last learned. It
// learns it again, with a look-up of the stream before the next record,
// when JetStream's advisory says that the stream was made (the advisory
// comes through the subscription's own queue, so the records of the old
// stream before it keep the old epoch and those of the new one get the
// new), when the connection to NATS came back, and when a record's
// sequence is not past the last one's. A record that waited in the queue
// across a reconnection may be given the new epoch.
func (b *HistoryBroker) SubscribeHistory(handler func(hub.Record)) (hub.Interest, error) {
	epoch := b.Epoch()
	var last uint64
	stale := false
	var retry time.Time // a look-up failed: not again before
	reconnected := b.nc.StatusChanged(nats.CONNECTED)
	in, err := subscribeInterest(b.nc, b.prefix+"r.", func(topic string, m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		prev, _ := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
		select {
		case <-reconnected: // sent before this connection's first record
			stale = true
		default:
		}
		if seq <= last {
			stale = true // the stream started over
		}
		last = seq
		if stale && !time.Now().Before(retry) {
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			if e, err := b.lookStream(ctx); err == nil {
				epoch, stale = e, false
			} else {
				retry = time.Now().Add(time.Second)
			}
			cancel()
		}
		handler(hub.Record{Topic: topic, Epoch: epoch, Seq: seq, Prev: prev, Msg: m.Data})
	}, &aside{subject: b.advisorySubject(), f: func(*nats.Msg) { stale, retry = true, time.Time{} }})
	if err != nil {
		b.nc.RemoveStatusListener(reconnected)
		return nil, err
	}
	in.onClose = func() { b.nc.RemoveStatusListener(reconnected) }
	return in, nil
}

// historyBatch is how many messages one direct-get request asks for.
const historyBatch = 256

// History calls f with the stored messages of topic from sequence since
// on, in order, reading them with JetStream's direct get, historyBatch at
// a time; each carries the broker's Epoch. It first flushes the
// connection, so that the subscriptions the Hub made before it are in
// place at the server. When the stream is gone (no responders), it makes
// it again, and what it reads then is the new stream's: nothing yet.
func (b *HistoryBroker) History(ctx context.Context, topic string, since uint64, f func(hub.Record) error) error {
	if err := b.nc.FlushWithContext(ctx); err != nil {
		return err
	}
	subject := b.prefix + "h." + encodeTopic(topic)
	next := max(since, 1)
	epoch := b.Epoch()
	read, remade := false, false
	for {
		more, last, err := b.historyBatch(ctx, topic, epoch, subject, next, f)
		read = read || last > 0
		if errors.Is(err, errStreamGone) && !read && !remade {
			if err := b.ensureStream(ctx); err != nil {
				return fmt.Errorf("gustnats: reading the history: the stream is gone, and making it again: %w", err)
			}
			epoch, remade = b.Epoch(), true
			continue
		}
		if err != nil || !more {
			return err
		}
		next = last + 1
	}
}

// historyBatch reads one batch from next on, and reports whether more
// remain and the last sequence read.
func (b *HistoryBroker) historyBatch(ctx context.Context, topic, epoch, subject string, next uint64, f func(hub.Record) error) (more bool, last uint64, err error) {
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
		if errors.Is(err, nats.ErrNoResponders) || err == nil && streamGone(m) {
			return false, last, errStreamGone
		}
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
		if err := f(hub.Record{Topic: topic, Epoch: epoch, Seq: seq, Msg: m.Data}); err != nil {
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
