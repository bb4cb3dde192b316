package gustnats

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The history's stream and its epoch: how a HistoryBroker names the stream
// it stores into, notices that it started over, and makes it again when it
// is gone.

// checkTimeout bounds one look-up or creation of the stream.
const checkTimeout = 2 * time.Second

// epochOf names a stream by its creation time, which every instance reads
// alike from the server and which changes when the stream is made anew:
// base 36 of the Unix nanoseconds, a dozen letters and digits.
func epochOf(created time.Time) string {
	return strconv.FormatInt(created.UnixNano(), 36)
}

// Epoch names the history as it is now: the stream's creation time, the
// same for every instance, new when the stream is made again after the
// NATS server lost it. It does not wait for the network: it returns what
// the broker last learned, which it learns
//
//   - when it makes or finds the stream: NewHistory, and a publish or a
//     History that found the stream gone (no responders) and made it again;
//   - when its connection to NATS comes back: it looks the stream up, and
//     makes it again if the server came back without it;
//   - when JetStream announces that the stream was made
//     ($JS.EVENT.ADVISORY.STREAM.CREATED.<stream>; another instance made it
//     again): it looks it up;
//   - when the stream acknowledges a message, or republishes one to a
//     SubscribeHistory handler, at a sequence not past the highest it saw
//     (the stream started over): it looks it up before going on.
//
// The window: from the stream's re-creation until one of these reaches an
// instance, that instance still names the old epoch. It lasts one round
// trip after the advisory for an instance that stayed connected (the
// advisory reaches a SubscribeHistory handler before the new stream's first
// message, since the stream sends both in order), until its own reconnect
// for one that was away, and it is longer only for an instance without
// permission to subscribe to $JS.EVENT.> (its records then change epoch when
// the sequence goes back, or when it reconnects).
func (b *HistoryBroker) Epoch() string {
	return *b.epoch.Load()
}

// setEpoch records the stream's creation time as the epoch, and returns it.
func (b *HistoryBroker) setEpoch(created time.Time) string {
	e := epochOf(created)
	if old := b.epoch.Load(); old == nil || *old != e {
		b.epoch.Store(&e)
	}
	return e
}

// lookStream asks the server for the stream's info and records its epoch.
// Looks and makes are serialised, so that the epoch recorded last is the
// one read last.
func (b *HistoryBroker) lookStream(ctx context.Context) (string, error) {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return "", err
	}
	b.checks.Add(1)
	return b.setEpoch(s.CachedInfo().Created), nil
}

// ensureStream looks the stream up and, when the server says it does not
// have it, makes it with the broker's configuration: the NATS server came
// back on an empty store, or someone deleted the stream. It records the
// epoch of the stream it found or made.
func (b *HistoryBroker) ensureStream(ctx context.Context) error {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	s, err := b.js.Stream(ctx, b.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = b.js.CreateStream(ctx, b.cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another instance made it first, with other options.
			s, err = b.js.Stream(ctx, b.stream)
		}
	}
	if err != nil {
		return err
	}
	b.checks.Add(1)
	b.setEpoch(s.CachedInfo().Created)
	return nil
}

// streamGone tells whether a reply says that no stream takes the subject
// or that the stream does not exist: a publish's or a direct get's answer
// "no responders", or JetStream's "stream not found".
func streamGone(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// errStreamGone is the error of a reply that says the stream is gone.
var errStreamGone = errors.New("nats: no response from stream (it may be gone)")

// advisorySubject is JetStream's announcement that the stream was made.
func (b *HistoryBroker) advisorySubject() string {
	return "$JS.EVENT.ADVISORY.STREAM.CREATED." + b.stream
}
