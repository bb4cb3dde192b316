package hub

import (
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

// LocalBroker is a Broker for the Hubs of one process: Publish calls every
// subscribed handler, in the publisher's goroutine, before it returns. It is
// safe for concurrent use; its zero value is ready.
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
