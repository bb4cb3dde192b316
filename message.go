package gust

import (
	"io"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/utf8"
)

// Opcode is the type of a data message (RFC 6455 §5.2). Control frames
// have methods and callbacks of their own (WritePing, OnPong, Close, ...).
type Opcode uint8

// The data opcodes.
const (
	OpText   Opcode = 0x1
	OpBinary Opcode = 0x2
)

// The other opcodes RFC 6455 defines, which gust handles itself.
const (
	opContinuation Opcode = 0x0
	opClose        Opcode = 0x8
	opPing         Opcode = 0x9
	opPong         Opcode = 0xA
)

func (op Opcode) isControl() bool { return op&0x8 != 0 }

var opNames = [...]string{opContinuation: "continuation", OpText: "text", OpBinary: "binary",
	opClose: "close", opPing: "ping", opPong: "pong"}

func (op Opcode) String() string {
	if int(op) < len(opNames) && opNames[op] != "" {
		return opNames[op]
	}
	return "reserved"
}

// Message is one data message. Its Data sits in a pooled buffer that is
// the receiver's until Close, which gives the buffer back and sets Data to
// nil: keep no slice of the old Data after it. Close may be called more
// than once, from any goroutine; a Message kept past OnMessage is never
// reused, while one closed before OnMessage returned is gust's again and
// may carry the connection's next message. Pass Messages by pointer (go
// vet reports copies).
//
// A Message is an io.Reader of its bytes, whole or streamed (see
// Options.StreamThreshold and Streamed), so io.Copy serves both.
type Message struct {
	Opcode   Opcode // OpText or OpBinary
	streamed bool   // the Message is a streamedMessage's

	// closed is set by the first Close, which alone then touches buf, the
	// pooled buffer under Data. The struct is reused only when its handler
	// closed it before returning (readState.recycle), so that a late second
	// Close cannot give another message's buffer away. It is kept at 40
	// bytes: what only a streamed message needs lives beside it.
	closed atomic.Bool
	Data   []byte // nil for a streamed message: read it with Read
	buf    *[]byte
}

// streamedMessage is a streamed Message and its stream, in one allocation.
type streamedMessage struct {
	Message
	st msgStream
}

// stream returns the stream of a streamed message.
func (m *Message) stream() *msgStream {
	return &(*streamedMessage)(unsafe.Pointer(m)).st
}

// messageSlab hands out Messages 31 at a time (filling the 1,280-byte size
// class), so that receiving does not allocate per message. A slot is handed
// out once, unless its handler closed it before returning (recycle). A
// Message kept for long keeps its slab's structs alive, not their buffers.
// The read goroutine holds a slab only while it parses one read's bytes
// (putSlab), so an idle connection holds none.
type messageSlab struct {
	ms   [31]Message
	next int
}

var messageSlabs sync.Pool

// newMessage hands out the next unused Message of the read goroutine's slab.
func (rd *readState) newMessage(op Opcode, buf *[]byte, n int) *Message {
	s := rd.slab
	if s == nil || s.next == len(s.ms) {
		s, _ = messageSlabs.Get().(*messageSlab)
		if s == nil {
			s = new(messageSlab)
		}
		rd.slab = s // a used-up one is left to the garbage collector
	}
	m := &s.ms[s.next]
	s.next++
	m.closed.Store(false) // a recycled slot was closed
	m.Opcode, m.Data = op, (*buf)[:n]
	m.buf = buf
	return m
}

// recycle takes back m, the message the read goroutine handed to a handler
// that has returned, if the handler closed it: its slot then carries the
// next message. One still open is the handler's to keep.
func (rd *readState) recycle(m *Message) {
	if s := rd.slab; s != nil && s.next > 0 && &s.ms[s.next-1] == m && m.closed.Load() {
		s.next--
	}
}

// putSlab gives the read goroutine's slab back to the pool, with the
// Messages it has not handed out yet; a used-up one is dropped.
func (rd *readState) putSlab() {
	if s := rd.slab; s != nil {
		if s.next < len(s.ms) {
			messageSlabs.Put(s)
		}
		rd.slab = nil
	}
}

// Close gives the message's buffer back to the pool and sets Data to nil.
// Calls after the first do nothing.
func (m *Message) Close() {
	if m == nil {
		return
	}
	if m.closed.CompareAndSwap(false, true) {
		buf := m.buf
		m.Data, m.buf = nil, nil
		bufpool.Put(buf)
	}
}

// Read reads the message's next bytes into p, and returns io.EOF at its
// end. For a whole message it consumes Data, as a bytes.Buffer does.
//
// For a streamed message (Streamed), Read reads the frames as they arrive,
// on the read goroutine: call it from OnMessage only, until it returns.
// It checks as it goes: past Options.MaxMessageSize it fails with a
// *ProtocolError of code 1009, on invalid UTF-8 in text with 1007, and the
// connection fails with that code once OnMessage returns. Pings that arrive
// meanwhile reach OnPing; a close frame is answered and ends the stream
// with its *CloseError; an I/O error (io.ErrUnexpectedEOF when the peer
// left) is returned too. After Close, or once OnMessage has returned, Read
// returns an error.
func (m *Message) Read(p []byte) (int, error) {
	if m.streamed {
		if m.closed.Load() {
			return 0, errStreamOver
		}
		return m.stream().read(p)
	}
	if len(m.Data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, m.Data)
	m.Data = m.Data[n:]
	return n, nil
}

// Streamed reports whether the message is delivered as a stream (it
// outgrew Options.StreamThreshold): Data is nil, and Read yields its bytes.
func (m *Message) Streamed() bool { return m.streamed }

// endMessage completes the message whose last frame has been read (key
// was its masking key): it inflates a compressed one, checks its text and
// dispatches it.
func (rd *readState) endMessage(key [4]byte) (want, error) {
	c := rd.c
	if rd.loop && c.parallel != nil && len(c.parallel) == cap(c.parallel) {
		return wantGoroutine, nil // dispatch would wait for a parallel handler to end
	}
	if rd.msg == nil { // an empty message
		rd.msg = bufpool.Get(0)
	}
	wire := rd.n
	if rd.compressed {
		if rd.loop && (wire > loopInflateMax || rd.work >= loopWorkBudget) {
			return wantGoroutine, nil // its inflating and its handler may take long
		}
		if err := rd.inflate(); err != nil {
			threshold := c.cfg.StreamThreshold
			if threshold > 0 && isTooBig(err) && int64(threshold) < c.cfg.maxMessageSize() {
				// Small on the wire, past the threshold once inflated:
				// stream it from the compressed bytes it has.
				rd.utf8.Reset()
				return 0, rd.streamMessage(true, 0, key)
			}
			return 0, err
		}
		if rd.loop {
			rd.addWork(rd.n)
		}
	}
	// Uncompressed text was checked as it came; compressed, as it inflated.
	if rd.op == OpText && !c.cfg.SkipUTF8Validation && !rd.utf8.Complete() {
		return 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
	}
	if mt := c.cfg.Metrics; mt != nil {
		mt.Received(c, rd.op, rd.n, wire)
	}
	m := rd.newMessage(rd.op, rd.msg, rd.n)
	rd.msg, rd.op, rd.n = nil, 0, 0
	if c.closing.has(closeSent) {
		m.Close() // the browser API drops messages that arrive while closing
		rd.recycle(m)
		return 0, nil
	}
	rd.dispatch(m)
	return 0, nil
}

// inflate replaces the compressed message in rd.msg with its
// inflated bytes, checking size and text as they come out.
func (rd *readState) inflate() error {
	c := rd.c
	var v *utf8.Validator
	if rd.op == OpText && !c.cfg.SkipUTF8Validation {
		v = &rd.utf8
	}
	limit := c.cfg.maxMessageSize()
	if t := int64(c.cfg.StreamThreshold); t > 0 && t < limit {
		limit = t // past it, the message is streamed instead
	}
	rd.msg = bufpool.Grow(rd.msg, rd.n+len(deflate.Tail))
	copy((*rd.msg)[rd.n:], deflate.Tail)
	out, n, err := c.deflate.Inflate((*rd.msg)[:rd.n+len(deflate.Tail)], limit, v)
	if err != nil {
		return inflateError(err)
	}
	bufpool.Put(rd.msg)
	rd.msg, rd.n = out, n
	return nil
}

// dispatch hands a message to OnMessage, on the read goroutine or, with
// Options.Parallel, on a short-lived goroutine.
func (rd *readState) dispatch(m *Message) {
	c := rd.c
	if c.parallel == nil {
		rd.called = true
		c.handler.OnMessage(c, m)
		rd.recycle(m)
		return
	}
	c.parallel <- struct{}{}
	c.inflight.Add(1)
	go func() {
		defer func() {
			<-c.parallel
			c.inflight.Done()
		}()
		if !c.cfg.DisableRecovery {
			defer func() {
				if p := recover(); p != nil {
					err := c.recovered(p)
					// Not on the read goroutine: no linger, which reads.
					c.wr.closeFrame(StatusInternalError, "")
					c.abort(err)
				}
			}()
		}
		c.handler.OnMessage(c, m)
	}()
}
