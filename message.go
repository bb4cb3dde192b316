package gust

import (
	"sync"
	"sync/atomic"

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

// Message is one complete data message. Its Data sits in a pooled buffer
// that belongs to the receiver until it calls Close, which gives the buffer
// back to the pool and sets Data to nil: after Close, keep no slice of the
// old Data, whose bytes may then belong to another message.
//
// Close may be called more than once, from any goroutine: only the first
// call gives the buffer back, later ones do nothing. gust never reuses a
// Message for another message, so a late Close can only ever reach the
// buffer of the message it was called on. Pass Messages by pointer, as
// OnMessage does; a copy would share the buffer (go vet reports copies).
type Message struct {
	Opcode Opcode // OpText or OpBinary
	Data   []byte

	// closed is set by the first Close, which alone then touches buf, the
	// pooled buffer under Data. The struct itself is never reused: a pooled
	// one would come back as another message while its last owner still
	// held a pointer to it, and that owner's second Close would then give
	// the other message's buffer away.
	closed atomic.Bool
	buf    *[]byte
}

// messageSlab hands out Messages 32 at a time, each one once, so that
// receiving does not allocate per message although no Message is ever
// reused. The garbage collector frees a slab once none of its Messages is
// referenced: a Message kept for long keeps its 31 neighbours' structs
// (about 1.3 KiB), not their buffers, which Close gave back.
//
// A read goroutine keeps the slab it took while it parses what one read
// brought, and gives it back before it reads again (readState.putSlab), so
// a burst of messages pays one pool round trip and an idle connection holds
// no slab.
type messageSlab struct {
	ms   [32]Message
	next int
}

var messageSlabs sync.Pool

// newMessage hands out the next unused Message of the read goroutine's slab.
func (rd *readState) newMessage(op Opcode, buf *[]byte, n int) *Message {
	s := rd.slab
	if s == nil {
		s, _ = messageSlabs.Get().(*messageSlab)
		if s == nil {
			s = new(messageSlab)
		}
		rd.slab = s
	}
	m := &s.ms[s.next]
	s.next++
	if s.next == len(s.ms) {
		rd.slab = nil // used up: the garbage collector takes it from here
	}
	m.Opcode, m.Data = op, (*buf)[:n]
	m.buf = buf
	return m
}

// putSlab gives the read goroutine's slab back to the pool, with the
// Messages it has not handed out yet.
func (rd *readState) putSlab() {
	if rd.slab != nil {
		messageSlabs.Put(rd.slab)
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
