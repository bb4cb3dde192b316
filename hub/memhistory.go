package hub

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"sync"
	"time"
)

// MemoryHistoryOptions configures NewMemoryHistory. A nil pointer means the
// defaults; a field ≤ 0 means its default.
type MemoryHistoryOptions struct {
	// MaxPerTopic bounds the messages kept per topic. Default 1,000.
	MaxPerTopic int
	// MaxBytes bounds the memory of all topics' kept messages together:
	// their payloads and names, and about 100 bytes each for the record;
	// past it the oldest messages of all topics go first, whatever their
	// topic. Default 64 MiB.
	MaxBytes int64
	// MaxAge bounds how long a message is kept. A topic whose messages
	// have all gone is forgotten, so that the topics clients make up and
	// leave cost nothing after MaxAge. Default 24 h.
	MaxAge time.Duration
	// DuplicateWindow is how long the ID of a message handed to
	// PublishAsync with one is remembered: a message with the same ID
	// within it is not stored again (Hub.PublishOnce). At most 65,536 IDs
	// are remembered, the oldest forgotten first (about 100 bytes each).
	// Default 2 min.
	DuplicateWindow time.Duration
}

// Defaults of MemoryHistoryOptions.
const (
	defaultMaxPerTopic = 1000
	defaultMaxBytes    = 64 << 20
	defaultMaxAge      = 24 * time.Hour
	defaultDupWindow   = 2 * time.Minute
	maxDuplicateIDs    = 1 << 16
)

// What MemoryHistory counts for a record and a topic besides their bytes:
// the record, its place in the order of all records, and a map entry.
const (
	recordOverhead = 112
	topicOverhead  = 128
)

// MemoryHistory is a HistoryBroker for the Hubs of one process: it numbers
// every message, keeps the recent ones in memory within the bounds of its
// MemoryHistoryOptions, and delivers each to every subscribed handler in
// the publisher's goroutine before Publish returns (publishers take turns).
// With it, a single-process server gives its clients what
// [Hub.SubscribeSince] gives: what a reconnecting client missed, as long as
// the process lives. Its epoch is new with each MemoryHistory, so a client
// that kept a position from before a restart is told to start over.
//
// Memory is bounded by MaxBytes, whatever the number of topics, and a
// record's memory is given back once it is dropped. Reading the history
// (History, for a recovery) holds the lock Publish takes only to copy out
// the records asked for.
type MemoryHistory struct {
	opts  MemoryHistoryOptions
	epoch string

	deliver sync.Mutex   // held while handlers run: one message at a time, in order
	mu      sync.RWMutex // guards what follows; History holds it for reading
	seq     uint64
	topics  map[string]*memTopic
	// order holds every kept record's place, oldest first, from head on;
	// entries of records a topic's own bound dropped stay until they reach
	// the head, or until compact.
	order    []memEntry
	head     int
	bytes    int64 // counted as MaxBytes counts
	kept     int   // records
	handlers []*historyHandler
	ids      map[string]dupID // the IDs of the DuplicateWindow
	idOrder  []string         // oldest first, from idHead on
	idHead   int
}

type dupID struct {
	pos Position
	at  int64
}

type memTopic struct {
	name string
	recs []memRecord // oldest first
}

type memRecord struct {
	Record
	at   int64 // when it was stored, Unix nanoseconds
	size int64 // what it counts for in MaxBytes
}

type memEntry struct {
	t   *memTopic
	seq uint64
}

type historyHandler struct{ f func(Record) }

// NewMemoryHistory returns a MemoryHistory with a new epoch.
func NewMemoryHistory(opts *MemoryHistoryOptions) *MemoryHistory {
	var o MemoryHistoryOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxPerTopic <= 0 {
		o.MaxPerTopic = defaultMaxPerTopic
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultMaxBytes
	}
	if o.MaxAge <= 0 {
		o.MaxAge = defaultMaxAge
	}
	if o.DuplicateWindow <= 0 {
		o.DuplicateWindow = defaultDupWindow
	}
	var id [6]byte
	rand.Read(id[:])
	return &MemoryHistory{opts: o, epoch: base64.RawURLEncoding.EncodeToString(id[:]), topics: make(map[string]*memTopic),
		ids: make(map[string]dupID)}
}

var _ HistoryBroker = (*MemoryHistory)(nil)

// Epoch returns the MemoryHistory's epoch, made when it was.
func (b *MemoryHistory) Epoch() string { return b.epoch }

// Publish numbers msg, keeps a copy and delivers it.
func (b *MemoryHistory) Publish(topic string, msg []byte) error {
	b.store(topic, msg, "")
	return nil
}

// PublishAsync is Publish, which does not wait for the network: done is
// called before it returns, with the position of the message, or of the
// one stored with the same id within DuplicateWindow (then msg is neither
// stored nor delivered).
func (b *MemoryHistory) PublishAsync(topic string, msg []byte, id string, done func(Position, error)) error {
	pos := b.store(topic, msg, id)
	if done != nil {
		done(pos, nil)
	}
	return nil
}

// store numbers, keeps and delivers msg, unless id names one stored
// within DuplicateWindow; it returns the position of the one stored.
func (b *MemoryHistory) store(topic string, msg []byte, id string) Position {
	b.deliver.Lock()
	defer b.deliver.Unlock()
	now := time.Now().UnixNano()
	b.mu.Lock()
	if id != "" {
		b.forgetIDs(now)
		if d, ok := b.ids[id]; ok {
			b.mu.Unlock()
			return d.pos
		}
	}
	t := b.topics[topic]
	if t == nil {
		t = &memTopic{name: topic}
		b.topics[topic] = t
		b.bytes += int64(len(topic)) + topicOverhead
	}
	b.seq++
	data := append([]byte(nil), msg...) // cap: the size the allocator gave it
	r := memRecord{Record: Record{Topic: t.name, Epoch: b.epoch, Seq: b.seq, Msg: data}, at: now, size: int64(cap(data)) + recordOverhead}
	if n := len(t.recs); n > 0 {
		r.Prev = t.recs[n-1].Seq
	}
	if len(t.recs) == b.opts.MaxPerTopic {
		b.dropOldest(t)
	}
	t.recs = append(t.recs, r)
	b.order = append(b.order, memEntry{t, r.Seq})
	b.bytes += r.size
	b.kept++
	b.trim(now)
	pos := Position{Epoch: r.Epoch, Seq: r.Seq}
	if id != "" {
		b.ids[id] = dupID{pos, now}
		b.idOrder = append(b.idOrder, id)
	}
	hs := b.handlers
	b.mu.Unlock()
	for _, h := range hs {
		h.f(r.Record)
	}
	return pos
}

// forgetIDs forgets the IDs older than DuplicateWindow, and the oldest
// past maxDuplicateIDs, with b.mu held.
func (b *MemoryHistory) forgetIDs(now int64) {
	oldest := now - int64(b.opts.DuplicateWindow)
	for b.idHead < len(b.idOrder) {
		id := b.idOrder[b.idHead]
		if len(b.idOrder)-b.idHead < maxDuplicateIDs && b.ids[id].at > oldest {
			break
		}
		delete(b.ids, id)
		b.idOrder[b.idHead] = ""
		b.idHead++
	}
	if n := len(b.idOrder) - b.idHead; b.idHead > 1024 && b.idHead > n {
		copy(b.idOrder, b.idOrder[b.idHead:])
		clear(b.idOrder[n:])
		b.idOrder, b.idHead = b.idOrder[:n], 0
	}
}

// dropOldest drops t's oldest record, and t itself once it has none.
func (b *MemoryHistory) dropOldest(t *memTopic) {
	b.bytes -= t.recs[0].size
	b.kept--
	t.recs[0] = memRecord{} // let its bytes go
	t.recs = t.recs[1:]
	if len(t.recs) == 0 {
		delete(b.topics, t.name)
		b.bytes -= int64(len(t.name)) + topicOverhead
		t.recs = nil
	}
}

// trim drops the oldest records of all topics while they are over MaxBytes
// or older than MaxAge, with b.mu held.
func (b *MemoryHistory) trim(now int64) {
	oldest := now - int64(b.opts.MaxAge)
	for b.head < len(b.order) {
		e := b.order[b.head]
		live := len(e.t.recs) > 0 && e.t.recs[0].Seq == e.seq
		if live && b.bytes <= b.opts.MaxBytes && e.t.recs[0].at > oldest {
			break
		}
		b.order[b.head] = memEntry{}
		b.head++
		if live {
			b.dropOldest(e.t)
		}
	}
	b.compact()
}

// compact moves order's entries down when half of it is behind the head,
// and forgets the entries of records that are gone when they outnumber the
// kept ones: order stays within a few times the records kept.
func (b *MemoryHistory) compact() {
	n := len(b.order) - b.head
	switch {
	case n > 2*b.kept+1024:
		live := b.order[:0]
		for _, e := range b.order[b.head:] {
			if len(e.t.recs) > 0 && e.seq >= e.t.recs[0].Seq {
				live = append(live, e)
			}
		}
		clear(b.order[len(live):])
		b.order, b.head = live, 0
	case b.head > 1024 && b.head > n:
		copy(b.order, b.order[b.head:])
		clear(b.order[n:])
		b.order, b.head = b.order[:n], 0
	}
}

// Subscribe delivers every message to handler, whatever its topic.
func (b *MemoryHistory) Subscribe(handler func(topic string, msg []byte)) (func(), error) {
	in, err := b.SubscribeHistory(func(r Record) { handler(r.Topic, r.Msg) })
	return in.Unsubscribe, err
}

// SubscribeInterest is Subscribe: a MemoryHistory does not route by
// interest (a Hub ignores the topics it has no subscribers for).
func (b *MemoryHistory) SubscribeInterest(handler func(topic string, msg []byte)) (Interest, error) {
	return b.SubscribeHistory(func(r Record) { handler(r.Topic, r.Msg) })
}

// SubscribeHistory delivers every message to handler as a Record.
func (b *MemoryHistory) SubscribeHistory(handler func(Record)) (Interest, error) {
	h := &historyHandler{f: handler}
	b.mu.Lock()
	b.handlers = append(slices.Clip(b.handlers), h)
	b.mu.Unlock()
	return &memoryInterest{b: b, h: h}, nil
}

// History calls f with the kept messages of topic from since on, younger
// than MaxAge. It copies the records out (references to their bytes, which
// are never written again) a batch at a time under a read lock, and calls f
// without it.
func (b *MemoryHistory) History(ctx context.Context, topic string, since uint64, f func(Record) error) error {
	oldest := time.Now().UnixNano() - int64(b.opts.MaxAge)
	batch := make([]Record, 0, historyBatch)
	for next := since; ; {
		batch = b.batch(batch[:0], topic, next, oldest)
		for _, r := range batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := f(r); err != nil {
				return err
			}
		}
		if len(batch) < historyBatch {
			return nil
		}
		next = batch[len(batch)-1].Seq + 1
	}
}

// historyBatch is how many records History copies out at a time.
const historyBatch = 256

// batch appends to dst the records of topic from since on, stored after
// oldest, up to historyBatch of them.
func (b *MemoryHistory) batch(dst []Record, topic string, since uint64, oldest int64) []Record {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t := b.topics[topic]
	if t == nil {
		return dst
	}
	i, _ := slices.BinarySearchFunc(t.recs, since, func(r memRecord, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	for _, r := range t.recs[i:] {
		if len(dst) == historyBatch {
			break
		}
		if r.at > oldest {
			dst = append(dst, r.Record)
		}
	}
	return dst
}

// Stats returns what b keeps now (Hub.Stats reports it too).
func (b *MemoryHistory) Stats() HistoryStats {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return HistoryStats{Topics: len(b.topics), Records: b.kept, Bytes: b.bytes}
}

type memoryInterest struct {
	b *MemoryHistory
	h *historyHandler
}

func (in *memoryInterest) Add(string) error { return nil }
func (in *memoryInterest) Remove(string)    {}

func (in *memoryInterest) Unsubscribe() {
	in.b.mu.Lock()
	in.b.handlers = slices.DeleteFunc(slices.Clone(in.b.handlers), func(h *historyHandler) bool { return h == in.h })
	in.b.mu.Unlock()
}
