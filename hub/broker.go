package hub

import (
	"context"
	"sync"
	"sync/atomic"
)

// Broker carries messages between the Hubs of several processes, so that a
// message published on one machine reaches the connections of every other:
// set it as Options.Broker of each Hub ([New]). The cluster/nats module
// has one for NATS; [NewLocalBroker] connects the Hubs of one process.
//
// msg is opaque to the Broker (the Hub's own encoding of the message);
// topic is the Hub topic it was published to, "" for PublishAll, given so
// that a Broker can route by it.
type Broker interface {
	// Publish sends msg to the handlers subscribed through every Broker of
	// the cluster, this process's included or not (a Hub ignores its own
	// messages). Publish must not keep msg after it returns, and should not
	// block for long: Hub.Publish waits for it.
	Publish(topic string, msg []byte) error

	// Subscribe calls handler with every message published in the cluster
	// from now until unsubscribe is called. handler must not keep msg after
	// it returns; it does not block (a Hub only queues the message in its
	// connections' outboxes). Once unsubscribe has returned, handler is not
	// called again, except by deliveries already under way.
	Subscribe(handler func(topic string, msg []byte)) (unsubscribe func(), err error)
}

// InterestBroker is a Broker that routes by interest: a Hub whose Broker
// implements it subscribes with SubscribeInterest instead of Subscribe, and
// tells the Broker which topics have local subscribers, so that a process
// receives only the messages of its own topics (and PublishAll's) instead of
// the whole cluster's.
type InterestBroker interface {
	Broker

	// SubscribeInterest is Subscribe for a handler that wants the messages
	// published with topic "" and the all flag (Hub.PublishAll) and those
	// of the topics it was told of through the returned Interest, and may
	// be spared every other: from the Interest's Add of a topic until its
	// Remove, the Broker must deliver what the cluster publishes to that
	// topic. It may deliver more (a handler ignores what it has no
	// subscribers for). Interest.Unsubscribe ends the subscription as
	// Subscribe's unsubscribe does.
	SubscribeInterest(handler func(topic string, msg []byte)) (Interest, error)
}

// HistoryBroker is an InterestBroker that numbers and keeps each topic's
// recent messages, so that a connection that comes back misses nothing
// ([Hub.SubscribeSince]). With one, a Hub sends its messages only through
// the Broker and delivers them, its own included, when the Broker brings
// them back numbered: every process delivers a topic's messages in the
// same order, each framed with its sequence (Options.Frame).
type HistoryBroker interface {
	InterestBroker

	// SubscribeHistory is SubscribeInterest for a handler that gets each
	// message as a Record, from one goroutine, in the order of their
	// sequences within a topic — its own Hub's messages included, once
	// Publish has stored them.
	SubscribeHistory(handler func(Record)) (Interest, error)

	// History calls f, in order, with the records of topic that the
	// history holds from sequence since on: since itself first when it
	// still holds it, which tells that nothing after it is lost. It stops
	// at f's first error and returns it. Every message stored before
	// History is called is among them, and every message stored after
	// reaches the SubscribeHistory handler once its Interest has added
	// topic (History is called after Add): nothing falls between.
	History(ctx context.Context, topic string, since uint64, f func(Record) error) error
	// Epoch names the history as it is now. It changes whenever the history
	// starts over and its sequences with it (a MemoryHistory made anew, a
	// stream re-created after the broker lost its store), so that a
	// position a client kept from before is known for what it is. Records
	// carry the epoch that numbered them. Epoch does not wait for the
	// network.
	Epoch() string
	// PublishAsync is Publish without the wait: it takes msg (not keeping
	// it) and returns at once, with an error only when it cannot take it
	// (its queue is full, it is closed); then it calls done, once, from any
	// goroutine, with the position the message was stored at, or the error
	// that kept it out (it may then have been stored anyway). id, when not
	// empty, names the message (a Hub passes at most 32 bytes): one whose
	// id was stored within the Broker's duplicate window is not stored
	// again, and done gets the position of the one stored. The messages
	// of a topic handed over one after another are stored in that order,
	// and done is called in the order of hand-over. done must not block;
	// nil means no report.
	PublishAsync(topic string, msg []byte, id string, done func(Position, error)) error
}

// Record is a message as a HistoryBroker numbers it.
type Record struct {
	Topic string
	// Epoch is the epoch of the history that numbered the message
	// (HistoryBroker.Epoch).
	Epoch string
	// Seq is the message's sequence: it grows with each message of the
	// topic, not necessarily by one (a NATS stream numbers the messages
	// of all topics together).
	Seq uint64
	// Prev is the sequence of the topic's message before this one that
	// the history held when this one was stored; 0 when none.
	Prev uint64
	// Msg is what the Hub handed Publish. It is the handler's only while
	// it runs.
	Msg []byte
}

// Interest is the subscription of one Hub to an [InterestBroker]: the Hub
// calls Add when a topic gains its first local subscriber and Remove when
// it loses its last one (a connection that unsubscribes, is removed, or
// closes), so Add and Remove alternate for each topic, starting with Add.
//
// The Hub calls Add and Remove with its lock held, to keep them in the
// order of the changes they report: they must return soon (not wait for
// the network), must not call the Hub or the handler, and may let the
// change reach the cluster just after they return — a message published
// elsewhere in that moment may be missed. After Unsubscribe, Add and Remove
// do nothing.
type Interest interface {
	// Add starts the delivery of topic's messages. Its error, if any, is
	// logged by the Hub, whose local subscribers still get what is
	// published on this Hub.
	Add(topic string) error
	// Remove stops it.
	Remove(topic string)
	// Unsubscribe ends the subscription, as Broker.Subscribe's unsubscribe.
	Unsubscribe()
}

// LocalBroker is a Broker for the Hubs of one process: Publish calls every
// subscribed handler, in the publisher's goroutine, before it returns. It
// does not route by interest: a handler costs a function call per message.
// It is safe for concurrent use; its zero value is ready.
type LocalBroker struct {
	mu       sync.Mutex                      // serialises Subscribe and unsubscribe
	handlers atomic.Pointer[[]*localHandler] // copy on write: Publish takes no lock
}

type localHandler struct {
	f func(topic string, msg []byte)
}

// NewLocalBroker returns an empty LocalBroker.
func NewLocalBroker() *LocalBroker { return new(LocalBroker) }

// Publish calls every handler with topic and msg.
func (b *LocalBroker) Publish(topic string, msg []byte) error {
	if hs := b.handlers.Load(); hs != nil {
		for _, h := range *hs {
			h.f(topic, msg)
		}
	}
	return nil
}

// Subscribe adds handler; unsubscribe removes it (calling it again does
// nothing).
func (b *LocalBroker) Subscribe(handler func(topic string, msg []byte)) (func(), error) {
	h := &localHandler{f: handler}
	b.mu.Lock()
	var next []*localHandler
	if hs := b.handlers.Load(); hs != nil {
		next = append(next, *hs...)
	}
	next = append(next, h)
	b.handlers.Store(&next)
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { b.remove(h) }) }, nil
}

func (b *LocalBroker) remove(h *localHandler) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var next []*localHandler
	for _, x := range *b.handlers.Load() {
		if x != h {
			next = append(next, x)
		}
	}
	b.handlers.Store(&next)
}
