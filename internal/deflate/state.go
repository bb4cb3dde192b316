package deflate

import (
	"bytes"
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
	fw           *flate.Writer // with context takeover, held between messages while busy, within the budget (hold.go)
	lent         bool          // fw is lent for the current batch of writes only
	recent       *[]byte       // the last bytes sent, to prime a pooled compressor with, when fw is not held
	writeSink    sink
	stream       Stream      // the message NextWriter compresses, while one is open
	idleTimer    *time.Timer // gives fw or recent back once the connection stops sending
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
// (RFC 7692 §7.2.1). With context takeover the connection keeps, for its
// next message, its compressor or the last bytes it sent (keep), until it
// stops sending; corked says that more writes may follow before the
// connection calls EndBatch. The caller holds the write lock and puts the
// buffer back.
func (d *State) Compress(p []byte, corked bool) (*[]byte, int, error) {
	d.writeSink = sink{}
	fw := d.fw
	if fw == nil {
		// A pooled compressor, primed with the last bytes sent if the
		// connection kept them, or else starting from an empty window
		// (after an idle release): context takeover allows
		// back-references into earlier messages, it never requires them,
		// so the peer decodes this as well.
		fw = d.getWriter(&d.writeSink, d.recentBytes())
	}
	_, err := fw.Write(p)
	if err == nil {
		err = fw.Flush()
	}
	d.keep(fw, p, err == nil, corked)
	buf, n := d.writeSink.buf, d.writeSink.n
	d.writeSink = sink{}
	if err != nil {
		bufpool.Put(buf)
		return nil, 0, err
	}
	if n >= 4 {
		n -= 4 // drop 00 00 ff ff
	}
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
	fw := d.getWriter(&s, nil)
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
// that), or a pooled one primed with the last bytes sent, or a fresh one,
// which the peer decodes as well, for a message compressed in fragments;
// the sink's first buffer has size bytes. The state holds no compressor
// and no bytes meanwhile, so that the idle release leaves the stream's
// alone.
func (d *State) StartStream(headroom, size int) *Stream {
	d.writeLock.Lock()
	fw := d.fw
	if fw != nil {
		d.unhold()
	} else {
		fw = d.getWriter(&d.writeSink, d.recentBytes())
	}
	d.dropRecent() // the stream's bytes are not kept: the message after it starts from its compressor's window or an empty one
	d.writeLock.Unlock()
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
// when keep is set, context takeover is in use and the budget allows (or to
// the free list); keep is false when the message failed or the connection
// ended. The caller holds the write lock.
func (s *Stream) End(keep bool) {
	d := s.d
	bufpool.Put(d.writeSink.buf)
	d.writeSink = sink{}
	if keep && !d.writeNoCtx && d.fw == nil && !d.released && tryHold() {
		d.fw = s.fw
		d.usedRecently = true
		d.armIdleRelease()
	} else {
		d.putWriter(s.fw)
	}
	*s = Stream{}
}
