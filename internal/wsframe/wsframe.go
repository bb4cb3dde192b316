// Package wsframe is the WebSocket frame codec (RFC 6455 §5.2): pure
// functions over bytes. The reader feeds Parse what has arrived; the
// writers encode headers with Put, and a client's with a masking key from
// its KeySource. The root package instantiates Header with its Opcode.
package wsframe

import (
	"crypto/rand"
	"encoding/binary"
)

// MaxHeaderSize is the longest a frame header gets: 2 bytes, a 64-bit
// length and a masking key.
const MaxHeaderSize = 14

// MaxControlPayload is the longest payload of a control frame (§5.5).
const MaxControlPayload = 125

// The opcodes Parse checks (§5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// Header is a frame's header, checked.
type Header[Op ~uint8] struct {
	Op         Op
	Fin        bool
	Compressed bool // RSV1: the first frame of a compressed message
	Key        [4]byte
	Length     int64
}

// Error is a header that breaks the protocol: the reason of the close frame
// (1002) that answers it.
type Error string

func (e Error) Error() string { return string(e) }

// Parse parses and checks the frame header at the start of b into h. It
// returns the header's length, or 0 and no error while b does not hold all
// of it; a bad header fails as soon as its first two bytes arrive. server
// says which side reads (only a client masks), deflate whether RSV1 may
// mark a compressed message (RFC 7692 §6).
func Parse[Op ~uint8](b []byte, h *Header[Op], server, deflate bool) (int, error) {
	if len(b) < 2 {
		return 0, nil
	}
	*h = Header[Op]{Fin: b[0]&0x80 != 0, Op: Op(b[0] & 0x0f)}
	masked := b[1]&0x80 != 0
	length := int64(b[1] & 0x7f)
	if rsv := b[0] & 0x70; rsv != 0 || masked != server || h.Op > opBinary {
		// Not an uncompressed data frame masked as it should be: check all.
		if err := check(h, rsv, masked, length, server, deflate); err != nil {
			return 0, err
		}
	}
	hn := 2
	switch length {
	case 126:
		hn += 2
	case 127:
		hn += 8
	}
	if masked {
		hn += 4
	}
	if len(b) < hn {
		return 0, nil
	}
	switch length {
	case 126:
		length = int64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		u := binary.BigEndian.Uint64(b[2:])
		if u>>63 != 0 {
			return 0, Error("payload length with the most significant bit set")
		}
		length = int64(u)
	}
	if masked {
		copy(h.Key[:], b[hn-4:hn])
	}
	h.Length = length
	return hn, nil
}

// check checks what the first two bytes of a header say: the reserved bits
// rsv, the mask bit, the opcode and, for a control frame, fin and the 7-bit
// length. It sets h.Compressed for RSV1.
func check[Op ~uint8](h *Header[Op], rsv byte, masked bool, length int64, server, deflate bool) error {
	if rsv != 0 {
		if rsv != 0x40 || !deflate || (h.Op != opText && h.Op != opBinary) {
			return Error("reserved bits set")
		}
		h.Compressed = true
	}
	if masked != server {
		if server {
			return Error("client frame not masked")
		}
		return Error("server frame masked")
	}
	switch h.Op {
	case opContinuation, opText, opBinary:
	case opClose, opPing, opPong:
		if !h.Fin {
			return Error("fragmented control frame")
		}
		if length > MaxControlPayload {
			return Error("control frame payload over 125 bytes")
		}
	default:
		return Error("reserved opcode")
	}
	return nil
}

// Put encodes a frame header into b and returns its length. The first
// byte is op with FIN flipped: op's low bits are the opcode, 0x40 sets RSV1,
// and 0x80 clears FIN (a fragment before the last).
func Put[Op ~uint8](b []byte, op Op, n int, masked bool, key [4]byte) int {
	b[0] = byte(op) ^ 0x80
	var hn int
	switch {
	case n <= 125:
		b[1] = byte(n)
		hn = 2
	case n <= 0xffff:
		b[1] = 126
		binary.BigEndian.PutUint16(b[2:], uint16(n))
		hn = 4
	default:
		b[1] = 127
		binary.BigEndian.PutUint64(b[2:], uint64(n))
		hn = 10
	}
	if masked {
		b[1] |= 0x80
		copy(b[hn:], key[:])
		hn += 4
	}
	return hn
}

// PayloadLen is the length of the payload of f, a complete unmasked frame
// that Put encoded.
func PayloadLen(f []byte) int {
	switch f[1] & 0x7f {
	case 126:
		return len(f) - 4
	case 127:
		return len(f) - 10
	}
	return len(f) - 2
}

// KeySource makes client masking keys from crypto/rand, 16 per call:
// unpredictable (RFC 6455 §10.3) at little cost per frame.
type KeySource struct {
	buf [64]byte
	pos int
}

// Next returns the next masking key.
func (s *KeySource) Next() [4]byte {
	if s.pos == 0 || s.pos == len(s.buf) {
		rand.Read(s.buf[:])
		s.pos = 0
	}
	var k [4]byte
	copy(k[:], s.buf[s.pos:])
	s.pos += 4
	return k
}
