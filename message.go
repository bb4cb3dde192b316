package gust

import (
	"io"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gustws/gust/internal/bufpool"
)

// Opcode is the type of a data message (RFC 6455 §5.2): the two a user
// passes and receives are exported. Control frames have methods and
// callbacks of their own (WritePing, OnPong, Close, ...).
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

func (op Opcode) String() string {
	switch op {
	case opContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case opClose:
		return "close"
	case opPing:
		return "ping"
	case opPong:
		return "pong"
	}
	return "reserved"
}

// Message is one data message. A whole message's Data sits in a pooled
// buffer that belongs to the receiver until it calls Close, which gives the
// buffer back to the pool and sets Data to nil: after Close, keep no slice
// of the old Data, whose bytes may then belong to another message.
//
// A Message is also an io.Reader of its bytes, so that a handler may
// io.Copy any message to its destination: Read reads Data for a whole
// message, and the frames as they arrive for a streamed one (see
// Options.StreamThreshold and Streamed).
//
// Close may be called more than once, from any goroutine: only the first
// call gives the buffer back, later ones do nothing. A Message kept past
// OnMessage is never reused, however late its Close comes. One that
// OnMessage closed before returning is gust's again once OnMessage
// returns, and may carry the next message of its connection: with the
// usual defer m.Close(), receiving allocates nothing. Pass Messages by
// pointer, as OnMessage does; a copy would share the buffer (go vet
// reports copies).
type Message struct {
	Opcode   Opcode // OpText or OpBinary
	streamed bool   // the Message is a streamedMessage's

	// closed is set by the first Close, which alone then touches buf, the
	// pooled buffer under Data. The struct is reused only when the handler
	// closed it before returning (readState.recycle): one from a pool would
	// come back as another message while its last owner still held a
	// pointer to it, and that owner's second Close would then give the
	// other message's buffer away. A message kept past its handler costs a
	// fresh struct, and so garbage-collector work, so the struct is kept at
	// 40 bytes: what only a streamed message needs lives beside it.
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

// messageSlab hands out Messages 31 at a time, so that receiving does not
// allocate per message. A slot is handed out once, unless the handler it
// went to closed it before returning (readState.recycle): then it carries
// the next message. The garbage collector frees a slab once none of its
// Messages is referenced: a Message kept for long keeps its 30 neighbours'
// structs (1.2 KiB), not their buffers, which Close gave back. 31 Messages
// of 40 bytes and the index fill the 1,280-byte size class.
//
// A read goroutine keeps the slab it took while it parses what one read
// brought, and gives it back before it reads again (readState.putSlab), so
// a burst of messages pays one pool round trip and an idle connection holds
// no slab.
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
// end. For a whole message it reads Data and consumes it, as a
// bytes.Buffer does: Data holds what is left to read (Close ends it: Data
// is nil then).
//
// For a streamed message (Streamed), Read reads the frames as they arrive,
// on the read goroutine: call it from OnMessage only, and only until
// OnMessage returns. It checks what it reads as gust checks a whole
// message: past Options.MaxMessageSize, Read fails with a *ProtocolError
// of code 1009, on invalid UTF-8 in a text message with 1007 as soon as
// the bad byte arrives, and the connection then fails with that code once
// OnMessage returns. Control frames that arrive between the message's
// frames are handled as they come, while Read waits: a ping reaches OnPing
// (whose pong goes out before the next read from the socket), and a close
// frame is answered and ends the stream: Read returns its *CloseError, and
// the connection ends once OnMessage returns. An I/O error, such as the
// peer leaving (io.ErrUnexpectedEOF), is returned as well. After Close, or
// once OnMessage has returned, Read returns an error.
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

// Streamed reports whether the message is delivered as a stream: it had
// outgrown Options.StreamThreshold when it reached OnMessage, its Data is
// nil and its bytes come through Read.
func (m *Message) Streamed() bool { return m.streamed }
