package gust

import (
	"bufio"
	"io"
	"sync"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/mask"
)

// msgStream is the state of a streamed message (Options.StreamThreshold)
// while OnMessage reads it, on the read goroutine.
type msgStream struct {
	c      *Conn
	prefix []byte // what was buffered before the message was streamed, not yet read

	// the frame being read
	remaining int64 // payload bytes not yet read
	fin       bool
	key       [4]byte
	pos       int

	wire     int64 // the message's payload bytes announced so far, for the size limit
	text     bool  // check UTF-8 of the payload (an uncompressed text message)
	err      error // sticky: the stream, and then the connection, end with it
	rawDone  bool  // the last frame's payload has been read
	tailSent int   // bytes of deflate.Tail given to the inflater

	// a compressed message
	fr       io.ReadCloser // from deflate.State.Reader
	br       *bufio.Reader
	out      int64 // inflated bytes so far
	checkOut bool  // check UTF-8 of the inflated bytes
}

// streamReaders buffer the compressed bytes between the frames and flate,
// which reads a byte at a time.
var streamReaders sync.Pool

const streamReaderSize = 32 << 10

// streamMessage hands the message in progress to OnMessage as a stream, on
// the read goroutine (even with Options.Parallel): its frame of length
// bytes, whose header was just read, and the next ones are read as the
// handler reads. What it leaves unread is read and discarded once it
// returns, so that the next message starts on a frame boundary and a
// compressed stream's window stays in step.
func (c *Conn) streamMessage(fin bool, length int64, key [4]byte) error {
	rd := c.rd
	rd.userReads = true // its reads wait, in netpoll mode too
	defer func() { rd.userReads = false }()
	sm := &streamedMessage{Message: Message{Opcode: rd.op, streamed: true},
		st: msgStream{c: c, remaining: length, fin: fin, key: key, wire: int64(rd.n) + length}}
	m, s := &sm.Message, &sm.st
	if rd.msg != nil {
		s.prefix = (*rd.msg)[:rd.n]
	}
	checkText := rd.op == OpText && !c.cfg.SkipUTF8Validation
	if rd.compressed {
		s.checkOut = checkText
		if err := s.startInflate(); err != nil {
			return err
		}
	} else {
		s.text = checkText
	}
	if !c.closing.has(closeSent) { // the browser API drops messages that arrive while closing
		c.handler.OnMessage(c, m)
	}
	m.closed.Store(true)
	err := s.discard()
	if mt := c.cfg.Metrics; mt != nil && err == nil {
		payload := s.wire
		if s.fr != nil {
			payload = s.out
		}
		mt.Received(c, rd.op, int(payload), int(s.wire))
	}
	s.end()
	bufpool.Put(rd.msg)
	rd.msg, rd.op, rd.n = nil, 0, 0
	return err
}

// startInflate prepares the inflater, with the window the peer's earlier
// messages left when it keeps its context.
func (s *msgStream) startInflate() error {
	s.br, _ = streamReaders.Get().(*bufio.Reader)
	if s.br == nil {
		s.br = bufio.NewReaderSize(s, streamReaderSize)
	} else {
		s.br.Reset(s)
	}
	var err error
	s.fr, err = s.c.deflate.Reader(s.br)
	return err
}

// end gives the stream's buffers back.
func (s *msgStream) end() {
	if s.fr != nil {
		deflate.PutReader(s.fr)
		s.br.Reset(nil)
		streamReaders.Put(s.br)
		s.fr, s.br = nil, nil
	}
}

// discard reads what the handler left of the message, checking it as it
// goes, and returns the error that ends the connection, if any.
func (s *msgStream) discard() error {
	if s.err != nil {
		return s.err
	}
	buf := bufpool.Get(streamReaderSize)
	defer bufpool.Put(buf)
	for {
		if _, err := s.read(*buf); err != nil {
			if err != io.EOF {
				return err
			}
			return nil
		}
	}
}

// read reads the message's bytes, inflated if it is compressed.
func (s *msgStream) read(p []byte) (int, error) {
	if s.fr == nil {
		return s.readRaw(p)
	}
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.fr.Read(p)
	if s.err != nil { // from the frames under the inflater
		return 0, s.err
	}
	if n > 0 {
		s.out += int64(n)
		if s.out > s.c.maxMessageSize() {
			s.err = protocolError(StatusMessageTooBig, "message over the size limit once inflated")
			return 0, s.err
		}
		if s.checkOut && !s.c.rd.utf8.Feed(p[:n]) {
			s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
			return 0, s.err
		}
		s.c.deflate.Remember(p[:n])
	}
	switch err {
	case nil:
	case io.EOF:
		// The message ends with its last frame, not with the deflate
		// data, which may end sooner: what follows is read and ignored,
		// as a whole message's is, so that the frames after it are read
		// and checked before the handler sees the end.
		var scratch [512]byte
		for !s.rawDone {
			if _, err := s.readRaw(scratch[:]); err != nil && err != io.EOF {
				return 0, err
			}
		}
		if s.checkOut && !s.c.rd.utf8.Complete() {
			s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
			return 0, s.err
		}
	default:
		s.err = protocolError(StatusInvalidFramePayloadData, "invalid deflate data")
		return 0, s.err
	}
	return n, err
}

// Read gives the inflater the compressed bytes, then deflate.Tail.
func (s *msgStream) Read(p []byte) (int, error) {
	if !s.rawDone {
		n, err := s.readRaw(p)
		if err != io.EOF {
			return n, err
		}
	}
	if s.tailSent == len(deflate.Tail) {
		return 0, io.EOF
	}
	n := copy(p, deflate.Tail[s.tailSent:])
	s.tailSent += n
	return n, nil
}

// readRaw reads the message's payload as it came on the wire (unmasked):
// what was buffered before the stream began, then its frames' payloads,
// reading the control frames between them as the read loop would.
func (s *msgStream) readRaw(p []byte) (int, error) {
	if len(s.prefix) > 0 {
		n := copy(p, s.prefix)
		s.prefix = s.prefix[n:]
		return n, nil
	}
	for s.remaining == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.fin {
			if !s.rawDone {
				s.rawDone = true
				if s.text && !s.c.rd.utf8.Complete() {
					s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
					return 0, s.err
				}
			}
			return 0, io.EOF
		}
		if err := s.nextFrame(); err != nil {
			s.err = err
			return 0, err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	c := s.c
	rd := c.rd
	p = p[:min(int64(len(p)), s.remaining)]
	if rd.w == rd.r && len(p) >= c.cfg.ReadBufferSize/2 {
		// Large and nothing buffered: read straight into p.
		n, err := c.read(p)
		if err != nil {
			s.err = noEOF(err)
			return 0, s.err
		}
		p = p[:n]
		if c.server {
			s.pos = mask.Apply(p, s.key, s.pos)
		}
	} else {
		if rd.w == rd.r {
			if err := c.fill(); err != nil {
				s.err = noEOF(err)
				return 0, s.err
			}
		}
		p = p[:min(len(p), rd.w-rd.r)]
		s.pos = c.unmask(p, (*rd.buf)[rd.r:rd.r+len(p)], s.key, s.pos)
		rd.r += len(p)
	}
	s.remaining -= int64(len(p))
	if s.text && !rd.utf8.Feed(p) {
		s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		return 0, s.err
	}
	return len(p), nil
}

// nextFrame reads frames up to the message's next data frame, handling the
// control frames before it: pings and pongs reach their callbacks, and a
// close frame is answered and ends the stream with its *CloseError.
func (s *msgStream) nextFrame() error {
	c := s.c
	var hdr frameHeader
	h := &hdr
	err := c.readHeader(h)
	if err != nil {
		return err
	}
	if h.op.isControl() {
		return c.readControl(h.op, int(h.length), h.key)
	}
	if h.op != opContinuation {
		return protocolError(StatusProtocolError, "new message inside a fragmented message")
	}
	if err := c.rd.countEmpty(h); err != nil {
		return err
	}
	if h.length > c.maxMessageSize()-s.wire {
		return protocolError(StatusMessageTooBig, "message over the size limit")
	}
	s.wire += h.length
	s.remaining, s.fin, s.key, s.pos = h.length, h.fin, h.key, 0
	return nil
}

// waitStreamLocked waits, releasing the write lock meanwhile, until no
// NextWriter is open or the connection has ended: a data message may not go
// between the fragments of another (RFC 6455 §5.4). Control frames do not
// wait.
func (c *Conn) waitStreamLocked() {
	w := &c.wr
	for w.writerOpen.Load() && !c.closing.has(closeEnded) {
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
	c.waitStreamLocked()
	if err := c.writableLocked(); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	w.writerOpen.Store(true)
	w.mu.Unlock()
	frag := max(c.cfg.WriteBufferSize-maxHeaderSize, minReadBufferSize)
	return &messageWriter{c: c, msgOp: op, op: op, frag: frag, buf: bufpool.Get(maxHeaderSize + frag)}, nil
}

// messageWriter is NextWriter's writer. Its buffers keep maxHeaderSize bytes
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
			if mw.in == mw.frag {
				// A fragment's worth written, and more is coming: flush it
				// out, so that each fragment carries what was written
				// before it, as it does uncompressed.
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
		if mw.n == mw.frag {
			// Full, and more is coming: not the last fragment.
			if err := mw.flushFull(); err != nil {
				return written, err
			}
			continue
		}
		k := copy((*mw.buf)[maxHeaderSize+mw.n:maxHeaderSize+mw.frag], p)
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
	mw.z = mw.c.deflate.StartStream(maxHeaderSize, maxHeaderSize+mw.frag)
	mw.op |= rsv1
	raw := mw.buf
	mw.buf = nil
	err := mw.compress((*raw)[maxHeaderSize : maxHeaderSize+mw.n])
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
	if err := c.writableLocked(); err != nil {
		mw.err = err
		return err
	}
	if w.pingDue.CompareAndSwap(true, false) {
		if err := c.writeFrameLocked(opPing, nil); err != nil {
			mw.err = err
			return err
		}
	}
	op := mw.op
	if !final {
		op |= notFinal
	}
	p := (*mw.buf)[maxHeaderSize : maxHeaderSize+mw.n]
	var key [4]byte
	if !c.server {
		key = w.maskKey()
		mask.Apply(p, key, 0)
	}
	hn := putHeader(w.hdr[:], op, len(p), !c.server, key)
	start := maxHeaderSize - hn
	copy((*mw.buf)[start:], w.hdr[:hn])
	if err := c.writeEncodedLocked((*mw.buf)[start : maxHeaderSize+mw.n]); err != nil {
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

// release gives the buffers and the compressor back (the compressor to the
// connection, with context takeover) and ends the message for the waiting
// writers.
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

// ReadFrom writes what r yields until io.EOF; it does not close the
// writer. Uncompressed, r reads straight into the fragment buffer, with no
// copy and no buffer of its own; once the message is being compressed, the
// bytes go through a pooled buffer to the compressor.
func (mw *messageWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for mw.z == nil {
		if mw.done {
			return total, errClosed
		}
		if mw.err != nil {
			return total, mw.err
		}
		if mw.n == mw.frag {
			// Full, and r may have more: not the last fragment (if r
			// has none, Close sends an empty last one).
			if err := mw.flushFull(); err != nil {
				return total, err
			}
			continue
		}
		k, err := r.Read((*mw.buf)[maxHeaderSize+mw.n : maxHeaderSize+mw.frag])
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
