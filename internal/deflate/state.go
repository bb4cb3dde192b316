package deflate

import (
	"bytes"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/gustws/gust/internal/bufpool"
)

// State is a connection's permessage-deflate state: the write side,
// guarded by the connection's write lock (the caller holds it around the
// write side's methods unless a method says otherwise), and the read side,
// owned by the read goroutine.
type State struct {
	level     int
	threshold int

	// write side, guarded by writeLock
	writeLock    sync.Locker
	writeBits    int
	writeNoCtx   bool
	fw           *flate.Writer // held between messages only with context takeover, while busy
	writeSink    sink
	stream       Stream      // the message NextWriter compresses, while one is open
	idleTimer    *time.Timer // gives fw back once the connection stops sending
	timerArmed   bool
	usedRecently bool
	released     bool // Release ran: the connection ended

	// read side, owned by the read goroutine
	readBits  int
	readNoCtx bool
	readDict  []byte       // the last window of inflated bytes, with context takeover
	readSrc   bytes.Reader // a type flate has a fast path for
	chunks    []*[]byte    // the message being inflated, while Inflate runs
	probe     [1]byte      // reads past full chunks
}

// NewState is the state of a connection that negotiated p, on the server
// side (server true) or the client's, with c's level and threshold.
// writeLock is the lock the connection holds around its writes; the idle
// release of the compressor takes it.
func NewState(p Params, c *Config, server bool, writeLock sync.Locker) *State {
	d := &State{level: c.Level, threshold: c.Threshold, writeLock: writeLock}
	if server {
		d.writeBits, d.writeNoCtx = p.ServerMaxWindowBits, p.ServerNoContextTakeover
		d.readBits, d.readNoCtx = p.ClientMaxWindowBits, p.ClientNoContextTakeover
	} else {
		d.writeBits, d.writeNoCtx = p.ClientMaxWindowBits, p.ClientNoContextTakeover
		d.readBits, d.readNoCtx = p.ServerMaxWindowBits, p.ServerNoContextTakeover
	}
	return d
}

// Threshold is the size below which messages go out uncompressed.
func (d *State) Threshold() int { return d.threshold }

// Direction is how the messages that go one way are compressed.
type Direction struct {
	WindowBits        int  // the LZ77 window, as a power of two
	NoContextTakeover bool // each message starts from an empty window
}

// Directions reports how the messages this side sends (write) and those it
// receives (read) are compressed, as negotiated.
func (d *State) Directions() (write, read Direction) {
	return Direction{d.writeBits, d.writeNoCtx}, Direction{d.readBits, d.readNoCtx}
}

// Compressors are kept for reuse in small free lists, by level (1–9) and
// by window bits (8–14, levels ignored: flate's custom-window encoder has
// one). A free list, unlike a sync.Pool, drops what it has no room for at
// once: when a thousand connections go idle together, their compressors
// (~800 KiB each) are garbage at the next GC, not two GCs later.
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

func (d *State) getWriter(w io.Writer) *flate.Writer {
	if fw := d.freeList().get(); fw != nil {
		fw.Reset(w)
		return fw
	}
	var fw *flate.Writer
	if d.writeBits < MaxWindowBits {
		fw, _ = flate.NewWriterWindow(w, 1<<d.writeBits) // 256 B to 16 KiB: always valid
	} else {
		fw, _ = flate.NewWriter(w, d.level) // level checked by Config.WithDefaults
	}
	return fw
}

func (d *State) putWriter(fw *flate.Writer) {
	fw.ResetDict(nil, nil) // forget the dictionary: the next user has its own
	d.freeList().put(fw)
}

// sink collects compressed bytes into a pooled buffer.
type sink struct {
	buf *[]byte
	n   int
}

func (s *sink) Write(p []byte) (int, error) {
	if s.buf == nil {
		s.buf = bufpool.Get(max(s.n+len(p), 512))
	} else {
		s.buf = bufpool.Grow(s.buf, s.n+len(p))
	}
	copy((*s.buf)[s.n:], p)
	s.n += len(p)
	return len(p), nil
}

// Compress deflates p into a pooled buffer, without the 4-byte sync tail
// (RFC 7692 §7.2.1), and with context takeover keeps the compressor, to be
// given back once the connection stops sending. The caller holds the write
// lock and puts the buffer back.
func (d *State) Compress(p []byte) (*[]byte, int, error) {
	d.writeSink = sink{}
	fw := d.fw
	if fw == nil {
		// After an idle release the compressor starts from an empty
		// window: context takeover allows back-references into earlier
		// messages, it never requires them, so the peer decodes this as
		// well, and gust keeps no copy of what it sent.
		fw = d.getWriter(&d.writeSink)
	}
	_, err := fw.Write(p)
	if err == nil {
		err = fw.Flush()
	}
	if d.writeNoCtx || err != nil {
		d.putWriter(fw)
		d.fw = nil
	} else {
		d.fw = fw
		d.usedRecently = true
	}
	buf, n := d.writeSink.buf, d.writeSink.n
	d.writeSink = sink{}
	if err != nil {
		bufpool.Put(buf)
		return nil, 0, err
	}
	if n >= 4 {
		n -= 4 // drop 00 00 ff ff
	}
	d.armIdleRelease()
	return buf, n, nil
}

// Setting is what makes two compressed messages differ: the level and the
// window. What CompressAlone makes for one state serves any state of the
// same Setting.
type Setting struct {
	level, bits int
}

// Setting returns the setting of the messages this side sends.
func (d *State) Setting() Setting { return Setting{level: d.level, bits: d.writeBits} }

// CompressAlone deflates p from an empty window, apart from the
// connection's context, into a pooled buffer without the sync tail: a
// message that any receiver of the same Setting can take, whatever its
// context (a PreparedMessage). It needs no lock.
func (d *State) CompressAlone(p []byte) (*[]byte, int, error) {
	var s sink
	fw := d.getWriter(&s)
	_, err := fw.Write(p)
	if err == nil {
		err = fw.Flush()
	}
	d.putWriter(fw)
	if err != nil {
		bufpool.Put(s.buf)
		return nil, 0, err
	}
	return s.buf, max(0, s.n-4), nil
}

// DropContext gives the held compressor back, so that the next message
// starts from an empty window: the peer's window now holds a message (one
// CompressAlone made) that the compressor has not seen, and its
// back-references would be off.
func (d *State) DropContext() {
	if d.fw != nil {
		d.putWriter(d.fw)
		d.fw = nil
	}
}

// Stream is a message compressed as it is written, in fragments
// (NextWriter). Data writes wait while one is open, so it has the state's
// sink to itself: the compressed bytes gather in a pooled buffer whose
// first headroom bytes are left free for a frame header. It needs no lock
// but for End.
type Stream struct {
	d        *State
	fw       *flate.Writer
	headroom int
}

// StartStream takes the connection's compressor (taking the write lock for
// that), or a fresh one, which the peer decodes as well, for a message
// compressed in fragments; the sink's first buffer has size bytes. The
// state holds no compressor meanwhile, so that the idle release leaves the
// stream's alone.
func (d *State) StartStream(headroom, size int) *Stream {
	d.writeLock.Lock()
	fw := d.fw
	d.fw = nil
	d.writeLock.Unlock()
	if fw == nil {
		fw = d.getWriter(&d.writeSink)
	}
	d.stream = Stream{d: d, fw: fw, headroom: headroom}
	d.writeSink = sink{buf: bufpool.Get(size), n: headroom}
	return &d.stream
}

// Write feeds p to the compressor.
func (s *Stream) Write(p []byte) error {
	_, err := s.fw.Write(p)
	return err
}

// Flush flushes the compressor, so that what was written so far is in the
// sink.
func (s *Stream) Flush() error { return s.fw.Flush() }

// Fragment returns the sink's buffer and the number of compressed bytes in
// it after the headroom: the payload of the next frame, the last one
// (final) without its 4-byte sync tail (RFC 7692 §7.2.1). The caller frames
// it in place and calls Sent.
func (s *Stream) Fragment(final bool) (*[]byte, int) {
	n := s.d.writeSink.n - s.headroom
	if final && n >= 4 {
		n -= 4
	}
	return s.d.writeSink.buf, n
}

// Sent empties the sink's buffer for the next fragment.
func (s *Stream) Sent() { s.d.writeSink.n = s.headroom }

// End gives the sink's buffer back, and the compressor to the connection
// when keep is set and context takeover is in use (or to the free list);
// keep is false when the message failed or the connection ended. The
// caller holds the write lock.
func (s *Stream) End(keep bool) {
	d := s.d
	bufpool.Put(d.writeSink.buf)
	d.writeSink = sink{}
	if d.writeNoCtx || !keep || d.fw != nil {
		d.putWriter(s.fw)
	} else {
		d.fw = s.fw
		d.usedRecently = true
		d.armIdleRelease()
	}
	*s = Stream{}
}

// idleRelease is how long a connection keeps its compressor after its last
// compressed message, with context takeover. Then the compressor goes back
// to the free list: idle connections hold kilobytes, not the hundreds of
// kilobytes of a compressor.
const idleRelease = time.Second

// armIdleRelease schedules the release of a held compressor.
func (d *State) armIdleRelease() {
	if d.fw == nil || d.timerArmed {
		return
	}
	d.timerArmed = true
	if d.idleTimer == nil {
		d.idleTimer = time.AfterFunc(idleRelease, d.releaseIdle)
	} else {
		d.idleTimer.Reset(idleRelease)
	}
}

// releaseIdle runs on a timer: it gives the compressor back when nothing
// was compressed since the last check, and looks again later otherwise.
func (d *State) releaseIdle() {
	d.writeLock.Lock()
	defer d.writeLock.Unlock()
	if d.fw == nil || d.released {
		d.timerArmed = false
		return
	}
	if d.usedRecently {
		d.usedRecently = false
		d.idleTimer.Reset(idleRelease)
		return
	}
	d.putWriter(d.fw)
	d.fw = nil
	d.timerArmed = false
}

// Release gives the compressor back when the connection ends.
func (d *State) Release() {
	d.released = true
	if d.idleTimer != nil {
		d.idleTimer.Stop()
	}
	if d.fw != nil {
		d.putWriter(d.fw)
		d.fw = nil
	}
}
