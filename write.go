package gust

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/mask"
	"github.com/gustws/gust/internal/wsframe"
)

const maxControlPayload = wsframe.MaxControlPayload

// Where a connection's bytes wait. Three places, kept apart because their
// rules differ:
//
//   - the cork buffer (writeState.buf): frames written while the read
//     goroutine dispatches what one read brought, sent together before the
//     next read waits (uncork). Bytes, under the write lock, for at most
//     one turn; it is the cheapest of the three and holds the common case.
//   - the backlog (writeState.backlog, backlog.go): what the socket did not
//     take while no write could wait (an event loop dispatching). Bytes
//     already framed (and compressed: the compressor's window has moved
//     past them), so they can only be sent as they are, before anything
//     else. It has no limit of its own: every byte in it came from a write
//     its caller saw succeed, and it holds what the callbacks of one turn
//     on the loop wrote, which a goroutine then writes, waiting, before the
//     connection reads again.
//   - the outbox (outbox.go): messages queued by WriteAsync and the fan-out,
//     not framed yet, bounded by OutboxSize with a policy for the full
//     case, written by a goroutine that waits on the socket. Not bytes:
//     a message dropped from it must be whole, and a shared
//     PreparedMessage is framed once for every connection.
//
// Merging the backlog into the outbox would frame messages twice or give
// the outbox's policies bytes they cannot drop; merging the cork buffer into
// either would put a lock or a queue on the path of every reply.

// writeState is the write side of a Conn, guarded by mu.
type writeState struct {
	mu         sync.Mutex
	buf        *[]byte     // corked bytes; nil when nothing is corked
	backlog    *[]byte     // what the socket did not take while no write could wait
	writerEnd  *sync.Cond  // signalled when the NextWriter closes, or the connection ends; made by the first wait
	err        error       // sticky: a failed write leaves the stream unusable
	writerOpen atomic.Bool // a NextWriter is open: other data messages wait; set under mu
	pingDue    atomic.Bool // a heartbeat ping for the open NextWriter to send between fragments

	out        atomic.Pointer[outbox] // made by the first message queued (box); its own lock: queueing never waits for the socket
	maskSource *wsframe.KeySource     // a client's, made by its first frame

	// SetWriteDeadline's deadline, which the transport keeps to when it
	// arms the write timeout.
	userDeadline atomic.Int64 // Unix ns of SetWriteDeadline's deadline; 0 for none
	userChanged  atomic.Bool  // SetWriteDeadline was called since the last move

	hdr    [wsframe.MaxHeaderSize]byte
	corked bool  // writes append to buf, flushed later: the read goroutine dispatches, or an outbox batch is written
	noWait bool  // an event loop is dispatching: no write may wait (netWrite)
	early  bool  // flush once at earlyFlushSize: the read drained the socket (drainedBatch)
	unsent uint8 // log2 of the socket's unsent limit (unsentLimit, raiseUnsent); 0 when it has none
}

// conn returns the Conn w is the write state of. A writeState lives only as
// the wr field of a Conn, so its Conn starts wr's offset before it. No
// pointer back: it would be nil in a zero Conn, whose writes then need a
// check each to find it closed, and it would fill the last 8 bytes of
// Conn's 288-byte size class.
func (w *writeState) conn() *Conn {
	return (*Conn)(unsafe.Add(unsafe.Pointer(w), -int(unsafe.Offsetof(Conn{}.wr))))
}

// WriteMessage sends p as one message of type op (OpText or OpBinary). For
// OpText, p should be valid UTF-8; gust does not check what it sends. p may
// be reused as soon as WriteMessage returns.
//
// When permessage-deflate was negotiated, messages of at least
// CompressionOptions.Threshold bytes are compressed.
func (c *Conn) WriteMessage(op Opcode, p []byte) error {
	return c.writeMessage(op, p, true)
}

// WriteUncompressed sends p as one message of type op without compressing
// it, whatever was negotiated: for data that is already compressed.
func (c *Conn) WriteUncompressed(op Opcode, p []byte) error {
	return c.writeMessage(op, p, false)
}

// WriteString sends s as one text message.
func (c *Conn) WriteString(s string) error {
	return c.writeMessage(OpText, stringBytes(s), true)
}

func (c *Conn) writeMessage(op Opcode, p []byte, compress bool) error {
	if op != OpText && op != OpBinary {
		return errBadOpcode
	}
	c.wr.mu.Lock()
	c.wr.waitStreamLocked()
	err := c.wr.messageLocked(op, p, compress)
	c.wr.mu.Unlock()
	return err
}

// messageLocked writes a data message, compressed when permessage-deflate
// was negotiated, compress is set and p reaches the threshold.
func (w *writeState) messageLocked(op Opcode, p []byte, compress bool) error {
	c := w.conn()
	d := c.deflate
	if !compress || d == nil || len(p) < d.Threshold() {
		err := w.frameLocked(op, p)
		if err == nil {
			c.sent(op, len(p), len(p))
		}
		return err
	}
	if err := w.writableLocked(); err != nil {
		return err
	}
	buf, n, err := d.Compress(p, w.corked)
	if err != nil {
		return w.failed(err)
	}
	err = w.frameLocked(op|rsv1, (*buf)[:n])
	bufpool.Put(buf)
	if err == nil {
		c.sent(op, len(p), n)
	}
	return err
}

// WritePrepared sends a prepared message: compressed when the connection
// negotiated permessage-deflate and the message reaches the threshold,
// as WriteMessage would. On a client connection it frames the payload
// as WriteMessage does.
func (c *Conn) WritePrepared(pm *PreparedMessage) error {
	if pm.op != OpText && pm.op != OpBinary {
		return errBadOpcode // a zero PreparedMessage
	}
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	c.wr.waitStreamLocked()
	return c.wr.preparedLocked(pm)
}

// encodedLocked writes an encoded frame: corked, or at once.
func (w *writeState) encodedLocked(frame []byte) error {
	limit := w.conn().cfg.WriteBufferSize
	if w.buf != nil && len(*w.buf)+len(frame) > limit {
		if err := w.flushLocked(); err != nil {
			return err
		}
	}
	if !w.corked || len(frame) > limit {
		if w.buf != nil {
			if err := w.flushLocked(); err != nil {
				return err
			}
		}
		_, err := w.netWrite(frame)
		return w.failed(err)
	}
	if w.buf == nil {
		w.buf = bufpool.Get(limit)
		*w.buf = (*w.buf)[:0]
	}
	*w.buf = append(*w.buf, frame...)
	return w.flushEarlyLocked()
}

// preparedLocked is WritePrepared with w.mu held.
func (w *writeState) preparedLocked(pm *PreparedMessage) error {
	c := w.conn()
	if !c.server {
		return w.messageLocked(pm.op, pm.payload, true)
	}
	if err := w.writableLocked(); err != nil {
		return err
	}
	d := c.deflate
	if d == nil || len(pm.payload) < d.Threshold() {
		err := w.encodedLocked(pm.plain)
		if err == nil {
			c.sent(pm.op, len(pm.payload), len(pm.payload))
		}
		return err
	}
	f, err := pm.frameFor(d)
	if err != nil {
		return err
	}
	d.DropContext() // the peer's window holds f, which the compressor has not seen
	err = w.encodedLocked(f)
	if err == nil {
		c.sent(pm.op, len(pm.payload), wsframe.PayloadLen(f))
	}
	return err
}

// WritePing sends a ping with payload p (at most 125 bytes).
func (c *Conn) WritePing(p []byte) error { return c.wr.control(opPing, p) }

// WritePong sends a pong with payload p (at most 125 bytes).
func (c *Conn) WritePong(p []byte) error { return c.wr.control(opPong, p) }

// writableLocked returns the error a write must return now, if any.
func (w *writeState) writableLocked() error {
	c := w.conn()
	if c.conn == nil {
		return c.closedErr() // a zero Conn, or one whose handshake is in progress
	}
	if w.err != nil {
		return w.err
	}
	if c.closing.has(closeEnded | closeSent) {
		return errClosed
	}
	if (c.closing.recorded() != nil || c.closing.has(closeDue)) && !c.closing.has(closeWriting) {
		// Ending (abort, or OutboxCloseSlow): writes waiting for their
		// turn must not go before a slow consumer's close frame.
		return errClosed
	}
	return nil
}

// The private write functions, called with the write lock held, come in
// three layers: messages (messageLocked, preparedLocked); frames
// (frameLocked, encodedLocked), corked while the read goroutine
// dispatches or an outbox batch is written; and the socket (flushLocked,
// large, and netWrite, the only place a Conn writes to its socket).

// control writes one control frame (a ping or a pong).
func (w *writeState) control(op Opcode, p []byte) error {
	if len(p) > maxControlPayload {
		return errControlTooLong
	}
	w.mu.Lock()
	err := w.frameLocked(op, p)
	w.mu.Unlock()
	return err
}

// frameLocked encodes one final frame of p (op may carry rsv1) and
// corks it, or writes it at once: header and payload in one system call,
// or through large (a frame past the write buffer).
func (w *writeState) frameLocked(op Opcode, p []byte) error {
	c := w.conn()
	if err := w.writableLocked(); err != nil {
		return err
	}
	var key [4]byte
	if !c.server {
		key = w.maskKey()
	}
	hn := wsframe.Put(w.hdr[:], op, len(p), !c.server, key)
	total := hn + len(p)
	limit := c.cfg.WriteBufferSize

	if w.buf != nil && len(*w.buf)+total > limit {
		if err := w.flushLocked(); err != nil {
			return err
		}
	}
	if total <= limit {
		if w.buf == nil {
			w.buf = bufpool.Get(limit)
			*w.buf = (*w.buf)[:0]
		}
		w.appendFrame(hn, p, !c.server, key)
		if w.corked {
			return w.flushEarlyLocked()
		}
		return w.flushLocked()
	}
	// A large frame: the cork buffer is empty here.
	return w.large(hn, p, key, limit)
}

// appendFrame appends the header in w.hdr and p, masked with key if masked
// (the client side), to the cork buffer, which has room for both.
func (w *writeState) appendFrame(hn int, p []byte, masked bool, key [4]byte) {
	b := append(*w.buf, w.hdr[:hn]...)
	n := len(b)
	b = b[:n+len(p)]
	if masked {
		mask.ApplyCopy(b[n:], p, key, 0)
	} else {
		copy(b[n:], p)
	}
	*w.buf = b
}

// large writes a frame too big for the write buffer: the header and
// the payload's first piece from a pooled buffer, then on the server side
// the rest straight from p in one write; a client masks piece by piece.
func (w *writeState) large(hn int, p []byte, key [4]byte, limit int) error {
	c := w.conn()
	buf := bufpool.Get(limit)
	defer bufpool.Put(buf)
	b := (*buf)[:copy(*buf, w.hdr[:hn])]
	pos := 0
	for len(p) > 0 {
		n := min(len(p), cap(b)-len(b))
		start := len(b)
		b = b[:start+n]
		if c.server {
			copy(b[start:], p[:n])
		} else {
			pos = mask.ApplyCopy(b[start:], p[:n], key, pos)
		}
		p = p[n:]
		if _, err := w.netWrite(b); err != nil {
			return w.failed(err)
		}
		b = b[:0]
		if c.server && len(p) > 0 {
			_, err := w.netWrite(p)
			return w.failed(err)
		}
	}
	return nil
}

// flushLocked writes the cork buffer and gives it back to the pool.
func (w *writeState) flushLocked() error {
	if w.buf == nil {
		return nil
	}
	var err error
	if len(*w.buf) > 0 && w.err == nil {
		_, err = w.netWrite(*w.buf)
	}
	w.releaseBuffer()
	return w.failed(err)
}

// releaseBuffer gives the cork buffer back.
func (w *writeState) releaseBuffer() {
	if w.buf != nil {
		bufpool.Put(w.buf)
		w.buf = nil
	}
}

// netWrite writes p to the connection's transport, the only place gust
// does once the handshake is over; the caller holds the write lock.
func (w *writeState) netWrite(p []byte) (int, error) {
	if u := w.unsent; u != 0 && len(p) > 1<<u {
		w.raiseUnsent(len(p))
	}
	if w.noWait || w.backlog != nil {
		return w.netWriteBacklog(p)
	}
	return w.conn().tr.write(p, false)
}

// setDeadline is SetWriteDeadline: it applies t at once, which ends a
// write blocked now, and records it for netWrite.
func (w *writeState) setDeadline(t time.Time) error {
	c := w.conn()
	if c.conn == nil {
		return errClosed
	}
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	w.userDeadline.Store(ns)
	w.userChanged.Store(true)
	return c.conn.SetWriteDeadline(t)
}

// failed makes a write error sticky and ends the connection: a frame
// cut in the middle leaves the stream unusable.
func (w *writeState) failed(err error) error {
	c := w.conn()
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && c.cfg.WriteTimeout > 0 {
		err = fmt.Errorf("gust: write made no progress within the write timeout (%v): %w", c.cfg.WriteTimeout, err)
	}
	if w.err == nil {
		w.err = err
	}
	c.abort(err)
	return err
}

// flushEarlyLocked flushes the cork buffer once it holds earlyFlushSize
// bytes, the first time in a batch that asked for it (writeState.early).
func (w *writeState) flushEarlyLocked() error {
	if !w.early || len(*w.buf) < earlyFlushSize {
		return nil
	}
	w.early = false
	return w.flushLocked()
}

// batchLocked runs write with the write lock held and the writes corked,
// then flushes them in one system call, unless the read goroutine has corked
// the connection: it flushes before its next read. It returns the flush's
// error.
func (w *writeState) batchLocked(write func()) error {
	wasCorked := w.corked
	w.corked = true
	write()
	w.corked = wasCorked
	if wasCorked {
		return nil
	}
	w.conn().deflate.EndBatch()
	return w.flushLocked()
}

// Corking: writes made while the read goroutine dispatches what one read
// brought (from its callbacks, or from other goroutines meanwhile) are
// appended to the write buffer and reach the socket together, in one system
// call, before the next read waits (uncork), instead of one each.

// cork makes writes append to the cork buffer; the read goroutine calls it
// when it starts dispatching freshly read bytes. early asks for an early
// flush of the batch (drainedBatch).
//
// On an event loop it also makes every write not wait (netWriteBacklog).
// It never waits for the write lock there: a goroutine holding it may be
// waiting for the socket, so it reports false, and the loop hands the
// connection, and the bytes it read, to a goroutine instead (handOff).
func (w *writeState) cork(early bool) bool {
	c := w.conn()
	loop := c.rd.loop
	if c.parallel != nil && !loop {
		return true
	}
	if !loop {
		w.mu.Lock()
	} else if !w.mu.TryLock() {
		return false
	}
	if c.parallel == nil {
		w.corked = true
		w.early = early
	}
	w.noWait = loop
	w.mu.Unlock()
	c.rd.uncorkDue = true
	return true
}

// uncork flushes what was corked; the read goroutine calls it before each
// blocking read. On an event loop, what the socket does not take stays in
// the backlog, and the connection goes to a goroutine that writes it
// (handOff).
func (w *writeState) uncork() (yield, error) {
	c := w.conn()
	if !c.rd.uncorkDue {
		return goOn, nil
	}
	if !c.rd.loop {
		w.mu.Lock()
	} else if !w.mu.TryLock() {
		return handOff, nil // stays corked: the goroutine flushes
	}
	c.rd.uncorkDue = false
	w.corked, w.early = false, false
	c.deflate.EndBatch()
	err := w.flushLocked()
	w.noWait = false
	if err == nil && !c.rd.loop {
		err = w.failed(w.backlogLocked())
	}
	backlog := w.backlog != nil
	w.mu.Unlock()
	if err == nil && backlog {
		return handOff, nil
	}
	return goOn, err
}

// earlyFlushSize is how much a batch corks before its first flush when the
// read that brought it drained the socket and was large (earlyFlushBatch).
// The peer then sent all it could and waits for answers: a first part sent
// early lets it work while the rest of the batch is dispatched, instead of
// each side idling while the other handles a whole batch. A read that
// filled the buffer means more bytes are waiting, so the server is the one
// behind, and a small batch is answered soon anyway: those go out in one
// write. The cost is one write per earlyFlushBatch bytes read at most.
const (
	earlyFlushSize  = 16 << 10
	earlyFlushBatch = 40 << 10
)

// drainedBatch reports whether a read of n bytes into a buffer of size
// bytes calls for an early flush (earlyFlushSize).
func drainedBatch(n, size int) bool {
	return n < size && n >= earlyFlushBatch
}
