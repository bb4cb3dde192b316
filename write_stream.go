package gust

import (
	"io"
	"sync"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/mask"
	"github.com/gustws/gust/internal/wsframe"
)

// A message written in pieces (NextWriter, WriteFrom), never held whole.

// waitStreamLocked waits, releasing the write lock meanwhile, until no
// NextWriter is open or the connection has ended: a data message may not go
// between the fragments of another (RFC 6455 §5.4).
func (w *writeState) waitStreamLocked() {
	for w.writerOpen.Load() && !w.conn().closing.has(closeEnded) {
		if w.writerEnd == nil {
			w.writerEnd = sync.NewCond(&w.mu)
		}
		w.writerEnd.Wait()
	}
}

// NextWriter starts a message of type op (OpText or OpBinary) whose bytes
// are written to the returned writer and sent as they go, in fragments of
// up to Options.WriteBufferSize bytes; Close sends the last one. So a
// message of any size costs one write buffer (and, compressed, a
// compressor), not its size. Close must be called, also after an error.
//
// While the message is open, other data messages (WriteMessage, WriteJSON,
// WritePrepared, the outbox's writes) and a second NextWriter wait for its
// Close; control frames (pings, pongs, heartbeats, a close frame) still go
// out between its fragments. So a handler that opens a NextWriter must
// close it before it waits for anything that another write depends on. Once
// a close frame has been sent or the connection has ended, NextWriter, and
// Write and Close on an open writer, return net.ErrClosed, or the error of
// the write that ended the connection: a failed write ends it, as any write
// does. Options.WriteTimeout applies to each fragment.
//
// When permessage-deflate was negotiated, the message is compressed as it
// goes (RSV1 on its first frame), unless it is shorter than
// CompressionOptions.Threshold when Close comes before its first fragment
// is full; the compressor is flushed at each fragment, so that a fragment
// carries what was written before it (up to WriteBufferSize bytes), as it
// does uncompressed. The writer is not safe for use by several goroutines at once.
func (c *Conn) NextWriter(op Opcode) (io.WriteCloser, error) {
	if op != OpText && op != OpBinary {
		return nil, errBadOpcode
	}
	w := &c.wr
	w.mu.Lock()
	c.wr.waitStreamLocked()
	if err := c.wr.writableLocked(); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	w.writerOpen.Store(true)
	w.mu.Unlock()
	frag := max(c.cfg.WriteBufferSize-wsframe.MaxHeaderSize, minReadBufferSize)
	return &messageWriter{c: c, msgOp: op, op: op, frag: frag, buf: bufpool.Get(wsframe.MaxHeaderSize + frag)}, nil
}

// messageWriter is NextWriter's writer. Its buffers keep wsframe.MaxHeaderSize bytes
// free in front of the payload, for the frame header.
type messageWriter struct {
	c       *Conn
	msgOp   Opcode // the message's type
	op      Opcode // the next frame's: the message's, then continuation
	frag    int    // payload bytes per fragment
	payload int    // bytes written, for Metrics.Sent
	wire    int    // bytes sent in frames' payloads (compressed or not), for Metrics.Sent
	buf     *[]byte
	n       int // payload bytes in buf
	err     error
	done    bool

	z       *deflate.Stream // compressing the message, once decided; nil otherwise
	in      int             // bytes given to z since its last flush
	decided bool            // whether to compress has been decided
}

func (mw *messageWriter) Write(p []byte) (int, error) {
	if mw.done {
		return 0, errClosed
	}
	if mw.err != nil {
		return 0, mw.err
	}
	written := 0
	defer func() { mw.payload += written }()
	for len(p) > 0 {
		if mw.z != nil {
			if mw.in == mw.frag { // a fragment's worth, and more is coming
				if err := mw.flushCompressed(); err != nil {
					return written, err
				}
				continue
			}
			k := min(len(p), mw.frag-mw.in)
			if err := mw.compress(p[:k]); err != nil {
				return written, err
			}
			written += k
			p = p[k:]
			continue
		}
		if mw.n == mw.frag { // full, and more is coming: not the last fragment
			if err := mw.flushFull(); err != nil {
				return written, err
			}
			continue
		}
		k := copy((*mw.buf)[wsframe.MaxHeaderSize+mw.n:wsframe.MaxHeaderSize+mw.frag], p)
		mw.n += k
		written += k
		p = p[k:]
	}
	return written, nil
}

// flushFull sends the full buffer as a fragment, deciding first whether the
// message is compressed.
func (mw *messageWriter) flushFull() error {
	if !mw.decided {
		mw.decided = true
		if d := mw.c.deflate; d != nil && mw.n >= d.Threshold() {
			return mw.startCompress()
		}
	}
	return mw.sendFrame(false)
}

// startCompress starts compressing the message (deflate.State.StartStream)
// with what is buffered so far.
func (mw *messageWriter) startCompress() error {
	mw.z = mw.c.deflate.StartStream(wsframe.MaxHeaderSize, wsframe.MaxHeaderSize+mw.frag)
	mw.op |= rsv1
	raw := mw.buf
	mw.buf = nil
	err := mw.compress((*raw)[wsframe.MaxHeaderSize : wsframe.MaxHeaderSize+mw.n])
	bufpool.Put(raw)
	return err
}

// compress feeds p to the compressor.
func (mw *messageWriter) compress(p []byte) error {
	if err := mw.z.Write(p); err != nil {
		mw.err = err
		return err
	}
	mw.in += len(p)
	return nil
}

// flushCompressed flushes the compressor and sends what came out as a
// fragment that is not the last.
func (mw *messageWriter) flushCompressed() error {
	if err := mw.z.Flush(); err != nil {
		mw.err = err
		return err
	}
	mw.in = 0
	return mw.sendSink(false)
}

// sendSink sends the compressed bytes gathered so far as a frame; the last
// one without its 4-byte sync tail (RFC 7692 §7.2.1).
func (mw *messageWriter) sendSink(final bool) error {
	mw.buf, mw.n = mw.z.Fragment(final)
	err := mw.sendFrame(final)
	mw.z.Sent()
	mw.buf = nil
	return err
}

// sendFrame sends the payload in buf as a frame, masked on the client side.
func (mw *messageWriter) sendFrame(final bool) error {
	c := mw.c
	w := &c.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := c.wr.writableLocked(); err != nil {
		mw.err = err
		return err
	}
	if w.pingDue.CompareAndSwap(true, false) {
		if err := c.wr.frameLocked(opPing, nil); err != nil {
			mw.err = err
			return err
		}
	}
	op := mw.op
	if !final {
		op |= notFinal
	}
	p := (*mw.buf)[wsframe.MaxHeaderSize : wsframe.MaxHeaderSize+mw.n]
	var key [4]byte
	if !c.server {
		key = w.maskKey()
		mask.Apply(p, key, 0)
	}
	hn := wsframe.Put(w.hdr[:], op, len(p), !c.server, key)
	start := wsframe.MaxHeaderSize - hn
	copy((*mw.buf)[start:], w.hdr[:hn])
	if err := c.wr.encodedLocked((*mw.buf)[start : wsframe.MaxHeaderSize+mw.n]); err != nil {
		mw.err = err
		return err
	}
	mw.op, mw.n = opContinuation, 0
	mw.wire += len(p)
	return nil
}

// Close sends the message's last frame and lets other data messages go.
// Calls after the first return net.ErrClosed.
func (mw *messageWriter) Close() error {
	if mw.done {
		return errClosed
	}
	mw.done = true
	err := mw.err
	if err == nil {
		err = mw.finish()
	}
	mw.release()
	return err
}

// finish sends the last frame.
func (mw *messageWriter) finish() error {
	if mw.z == nil && !mw.decided {
		if d := mw.c.deflate; d != nil && mw.n >= d.Threshold() {
			if err := mw.startCompress(); err != nil {
				return err
			}
		}
	}
	if mw.z == nil {
		return mw.sendFrame(true)
	}
	if err := mw.z.Flush(); err != nil {
		mw.err = err
		return err
	}
	return mw.sendSink(true)
}

// release gives the buffers and the compressor back and lets the waiting
// writers go.
func (mw *messageWriter) release() {
	c := mw.c
	w := &c.wr
	bufpool.Put(mw.buf)
	mw.buf = nil
	w.mu.Lock()
	if mw.err == nil {
		c.sent(mw.msgOp, mw.payload, mw.wire)
	}
	if mw.z != nil {
		mw.z.End(!c.closing.has(closeEnded) && mw.err == nil)
		mw.z = nil
	}
	w.writerOpen.Store(false)
	w.pingDue.Store(false) // the outbox sends a ping still due
	if w.writerEnd != nil {
		w.writerEnd.Broadcast()
	}
	w.mu.Unlock()
}

// ReadFrom writes what r yields until io.EOF, without closing the writer.
// Uncompressed, r reads straight into the fragment buffer; compressed, the
// bytes go through a pooled buffer.
func (mw *messageWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for mw.z == nil {
		if mw.done {
			return total, errClosed
		}
		if mw.err != nil {
			return total, mw.err
		}
		if mw.n == mw.frag { // full, and r may have more (else Close sends an empty last one)
			if err := mw.flushFull(); err != nil {
				return total, err
			}
			continue
		}
		k, err := r.Read((*mw.buf)[wsframe.MaxHeaderSize+mw.n : wsframe.MaxHeaderSize+mw.frag])
		mw.n += k
		mw.payload += k
		total += int64(k)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
	buf := bufpool.Get(mw.frag)
	defer bufpool.Put(buf)
	for {
		n, err := r.Read(*buf)
		if n > 0 {
			if _, werr := mw.Write((*buf)[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// WriteFrom sends what r yields until io.EOF as one message of type op,
// through NextWriter: the message is never held whole in memory. It returns
// the bytes read from r and the first error; when r fails, the message
// already started is ended as it stands and r's error returned.
func (c *Conn) WriteFrom(op Opcode, r io.Reader) (int64, error) {
	w, err := c.NextWriter(op)
	if err != nil {
		return 0, err
	}
	n, err := w.(*messageWriter).ReadFrom(r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return n, err
}
