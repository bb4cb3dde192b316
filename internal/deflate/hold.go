package deflate

import (
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/gustws/gust/internal/bufpool"
)

// What a connection keeps between the messages it compresses with context
// takeover, and for how long.
//
// A compressor is 0.8 to 1.4 MiB once used (800 KiB at level 1).
// Connections hold one between messages only within a process-wide budget
// (holdLimit): when thousands of connections send at once, the first ones
// to fit hold theirs. Each of the others keeps its compressor
// for the rest of a batch of writes (lent, up to lendLimit: the answers to
// what one read brought, corked and flushed together) and gives it back at
// the batch's end (EndBatch), or else after each message, keeping instead
// the last bytes it sent (up to primeSize) to prime a pooled compressor
// with before its next message (flate's ResetDict). Either way the next
// message may refer back to earlier ones, as context takeover intends, at
// the cost of some CPU. A connection that stops sending gives up what it
// kept after idleRelease, and its next message starts from an empty window:
// context takeover allows back-references into earlier messages, it never
// requires them.

// holdLimit bounds the compressors held between messages, process-wide:
// 8 per GOMAXPROCS, at least 16 (13 MiB at level 1).
var holdLimit = int64(max(16, 8*runtime.GOMAXPROCS(0)))

// lendLimit bounds the compressors lent, past the budget, to connections
// for one batch of writes (corked, flushed together: what one read
// brought): 4 per GOMAXPROCS, at least 4. Batches are short, and as many
// run at once as goroutines or event loops dispatch, so this is seldom
// reached; past it, a connection primes a compressor for each message.
var lendLimit = int64(max(4, 4*runtime.GOMAXPROCS(0)))

// heldCount and lentCount count the compressors held between messages and
// lent for a batch.
var heldCount, lentCount atomic.Int64

// tryHold takes a place in the budget.
func tryHold() bool { return take(&heldCount, holdLimit) }

// tryLend takes a place among the compressors lent for a batch.
func tryLend() bool { return take(&lentCount, lendLimit) }

// take adds one to n unless it is at limit. It never lets n pass limit,
// even for a moment, so that what Kept reports is a true bound.
func take(n *atomic.Int64, limit int64) bool {
	for {
		v := n.Load()
		if v >= limit {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// primeSize bounds the bytes kept to prime a compressor with. Priming
// encodes them again, about 1 µs per KiB at level 1: with messages of a
// live feed (BenchmarkPrime), 2 KiB gets the bytes on the wire within 4% of
// a held compressor's for 1.5× its CPU (from an empty window: 1.7× the
// bytes, 1.2× the CPU); 4 KiB saves another 2% of the bytes for 1.8×.
const primeSize = 2 << 10

// idleRelease is how long a connection keeps its compressor, or its last
// bytes, after its last compressed message.
const idleRelease = time.Second

// Compressors are kept for reuse in small free lists, by level (1–9) and
// by window bits (8–14, levels ignored: flate's custom-window encoder has
// one). A free list, unlike a sync.Pool, drops what it has no room for at
// once: when a thousand connections go idle together, their compressors
// are garbage at the next GC, not two GCs later.
var (
	writerFree [flate.BestCompression + 1]freeList
	windowFree [MaxWindowBits]freeList
)

// freeList holds up to 2×GOMAXPROCS idle compressors.
type freeList struct {
	once sync.Once
	ch   chan *flate.Writer
}

func (f *freeList) list() chan *flate.Writer {
	f.once.Do(func() { f.ch = make(chan *flate.Writer, max(2, 2*runtime.GOMAXPROCS(0))) })
	return f.ch
}

func (f *freeList) get() *flate.Writer {
	select {
	case fw := <-f.list():
		return fw
	default:
		return nil
	}
}

func (f *freeList) put(fw *flate.Writer) {
	select {
	case f.list() <- fw:
	default: // full: let the GC have it
	}
}

func (d *State) freeList() *freeList {
	if d.writeBits < MaxWindowBits {
		return &windowFree[d.writeBits]
	}
	return &writerFree[d.level]
}

// getWriter returns a compressor writing to w, its window primed with dict
// (nil for an empty one): from the free list, or new.
func (d *State) getWriter(w io.Writer, dict []byte) *flate.Writer {
	fw := d.freeList().get()
	if fw == nil {
		if d.writeBits < MaxWindowBits {
			fw, _ = flate.NewWriterWindow(w, 1<<d.writeBits) // 256 B to 16 KiB: always valid
		} else {
			fw, _ = flate.NewWriter(w, d.level) // level checked by Config.WithDefaults
		}
		if dict == nil {
			return fw
		}
	}
	fw.ResetDict(w, dict) // keeps dict until the next ResetDict: putWriter forgets it
	return fw
}

func (d *State) putWriter(fw *flate.Writer) {
	fw.ResetDict(nil, nil) // forget the dictionary: the next user has its own
	d.freeList().put(fw)
}

// keep decides, after a message compressed with fw (ok false if it
// failed), what the connection keeps for its next one: the compressor if it
// has it already or the budget has room; or else the last bytes sent, and
// while the message is part of a batch (corked) the compressor too, lent
// until EndBatch; and nothing without context takeover or after a failure.
func (d *State) keep(fw *flate.Writer, p []byte, ok, corked bool) {
	switch {
	case !ok || d.writeNoCtx || d.released:
		if fw == d.fw {
			d.unhold()
		}
		d.putWriter(fw)
		d.dropRecent()
		return
	case fw == d.fw: // held or lent already: its window has it all
		if d.lent {
			d.remember(p) // for after the batch
		}
	case tryHold():
		d.fw = fw
		d.dropRecent()
	case corked && tryLend():
		d.fw, d.lent = fw, true
		d.remember(p)
	default:
		d.putWriter(fw)
		d.remember(p)
	}
	d.usedRecently = true
	d.armIdleRelease()
}

// EndBatch ends a batch of writes: a compressor lent for it is held if the
// budget now has room, and given back otherwise (the last bytes sent stay).
// The caller holds the write lock; d may be nil (no compression).
func (d *State) EndBatch() {
	if d == nil || !d.lent {
		return
	}
	if tryHold() {
		d.lent = false
		lentCount.Add(-1)
		d.dropRecent()
		return
	}
	fw := d.fw
	d.unhold()
	d.putWriter(fw)
}

// unhold gives the compressor's place, held or lent, back and leaves the
// compressor to the caller.
func (d *State) unhold() {
	if d.lent {
		lentCount.Add(-1)
	} else {
		heldCount.Add(-1)
	}
	d.fw, d.lent = nil, false
}

// recentBytes is what a pooled compressor is primed with: the last bytes
// sent, or nil.
func (d *State) recentBytes() []byte {
	if d.recent == nil {
		return nil
	}
	return *d.recent
}

// remember appends p, the message just sent, to the bytes kept, keeping the
// last primeSize of them (or the window, if smaller): the peer's window
// ends with them, in that order, so back-references into them land.
func (d *State) remember(p []byte) {
	size := min(primeSize, 1<<d.writeBits)
	if len(p) >= size {
		p = p[len(p)-size:]
	}
	var old []byte
	if d.recent != nil {
		old = *d.recent
	}
	keep := min(len(old), size-len(p))
	n := keep + len(p)
	if d.recent == nil || cap(*d.recent) < n {
		nb := bufpool.Get(n)
		copy(*nb, old[len(old)-keep:])
		bufpool.Put(d.recent)
		d.recent = nb
	} else {
		*d.recent = (*d.recent)[:n]
		copy(*d.recent, old[len(old)-keep:])
	}
	copy((*d.recent)[keep:], p)
}

func (d *State) dropRecent() {
	if d.recent != nil {
		bufpool.Put(d.recent)
		d.recent = nil
	}
}

// DropContext forgets the connection's context, so that the next message
// starts from an empty window: the peer's window now holds a message (one
// CompressAlone made) that neither the compressor nor the bytes kept have
// seen, and their back-references would be off. The idle release and the
// end of the connection call it too.
func (d *State) DropContext() {
	if d.fw != nil {
		fw := d.fw
		d.unhold()
		d.putWriter(fw)
	}
	d.dropRecent()
}

// armIdleRelease schedules the release of what the connection keeps.
func (d *State) armIdleRelease() {
	if (d.fw == nil && d.recent == nil) || d.timerArmed {
		return
	}
	d.timerArmed = true
	if d.idleTimer == nil {
		d.idleTimer = time.AfterFunc(idleRelease, d.releaseIdle)
	} else {
		d.idleTimer.Reset(idleRelease)
	}
}

// releaseIdle runs on a timer: it gives back what the connection keeps when
// nothing was compressed since the last check, and looks again later
// otherwise.
func (d *State) releaseIdle() {
	d.writeLock.Lock()
	defer d.writeLock.Unlock()
	if (d.fw == nil && d.recent == nil) || d.released {
		d.timerArmed = false
		return
	}
	if d.usedRecently {
		d.usedRecently = false
		d.idleTimer.Reset(idleRelease)
		return
	}
	d.DropContext()
	d.timerArmed = false
}

// Release gives back what the connection keeps when it ends.
func (d *State) Release() {
	d.released = true
	if d.idleTimer != nil {
		d.idleTimer.Stop()
	}
	d.DropContext()
}

// Kept reports the compressors that connections hold between messages and
// those lent for a batch of writes, process-wide, and the budget of the
// first (holdLimit): for tests.
func Kept() (held, lent, budget int64) { return heldCount.Load(), lentCount.Load(), holdLimit }
