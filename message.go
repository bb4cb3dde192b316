package gust

import (
	"sync"

	"github.com/gustws/gust/internal/bufpool"
)

// Opcode is a WebSocket frame opcode (RFC 6455 §5.2).
type Opcode uint8

// The opcodes RFC 6455 defines. Messages are OpText or OpBinary.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

func (op Opcode) isControl() bool { return op&0x8 != 0 }

func (op Opcode) String() string {
	switch op {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	return "reserved"
}

// Message is one complete data message. Its Data sits in a pooled buffer
// that belongs to the receiver until it calls Close; Close gives the buffer
// back and must be called at most once, after which neither the Message nor
// its Data may be used.
type Message struct {
	Opcode Opcode // OpText or OpBinary
	Data   []byte

	buf *[]byte
}

var messagePool = sync.Pool{New: func() any { return new(Message) }}

func newMessage(op Opcode, buf *[]byte, n int) *Message {
	m := messagePool.Get().(*Message)
	m.Opcode = op
	m.buf = buf
	m.Data = (*buf)[:n]
	return m
}

// Close gives the message's buffer back to the pool.
func (m *Message) Close() {
	if m == nil {
		return
	}
	bufpool.Put(m.buf)
	m.buf, m.Data = nil, nil
	messagePool.Put(m)
}
