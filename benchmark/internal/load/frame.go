package load

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// WebSocket opcodes (RFC 6455 §5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xa

	rsv1 = 0x40 // "per-message compressed" with permessage-deflate (RFC 7692 §6)
)

// appendHeader appends a final frame header with the mask bit and key when masked.
func appendHeader(dst []byte, op byte, n int, masked bool, key [4]byte) []byte {
	dst = append(dst, 0x80|op)
	var m byte
	if masked {
		m = 0x80
	}
	switch {
	case n < 126:
		dst = append(dst, m|byte(n))
	case n < 1<<16:
		dst = append(dst, m|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if masked {
		dst = append(dst, key[:]...)
	}
	return dst
}

// maskBytes XORs b with key, starting at key position pos (0..3), and returns the position
// for the next byte. Eight bytes at a time.
func maskBytes(key [4]byte, pos int, b []byte) int {
	if len(b) == 0 {
		return pos
	}
	// Rotate the key so that b[0] lines up with key[pos].
	var k [4]byte
	for i := range k {
		k[i] = key[(pos+i)&3]
	}
	k32 := uint64(binary.LittleEndian.Uint32(k[:]))
	k64 := k32 | k32<<32
	n := len(b)
	for len(b) >= 32 {
		w := (*[32]byte)(b) // one bounds check per 32 bytes
		binary.LittleEndian.PutUint64(w[0:], binary.LittleEndian.Uint64(w[0:])^k64)
		binary.LittleEndian.PutUint64(w[8:], binary.LittleEndian.Uint64(w[8:])^k64)
		binary.LittleEndian.PutUint64(w[16:], binary.LittleEndian.Uint64(w[16:])^k64)
		binary.LittleEndian.PutUint64(w[24:], binary.LittleEndian.Uint64(w[24:])^k64)
		b = b[32:]
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)^k64)
		b = b[8:]
	}
	for i := range b {
		b[i] ^= k[i&3]
	}
	return (pos + n) & 3
}

// message describes what every connection sends: a payload template whose first seqLen bytes
// are replaced by the message's sequence number (so that a lost, repeated or reordered echo is
// caught), or a fixed payload (seqLen 0) when the user gave one with -m or -f.
type message struct {
	op     byte
	data   []byte
	seqLen int
}

func newMessage(fixed []byte, size int, binaryMsg bool, rnd *rand.Rand) (*message, error) {
	m := &message{op: opText}
	if binaryMsg {
		m.op = opBinary
	}
	if fixed != nil {
		m.data = fixed
		return m, nil
	}
	if size < 0 {
		return nil, fmt.Errorf("payload size %d < 0", size)
	}
	m.data = make([]byte, size)
	if binaryMsg {
		for i := range m.data {
			m.data[i] = byte(rnd.Uint32())
		}
		if size >= 8 {
			m.seqLen = 8
		}
	} else {
		const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 {}[]:,\"'.-_"
		for i := range m.data {
			m.data[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		if size >= 16 {
			m.seqLen = 16
		}
	}
	return m, nil
}

// putSeq writes the sequence field of message s into dst[:m.seqLen].
func (m *message) putSeq(dst []byte, s uint64) {
	switch m.seqLen {
	case 8:
		binary.BigEndian.PutUint64(dst, s)
	case 16:
		const hex = "0123456789abcdef"
		for i := 15; i >= 0; i-- {
			dst[i] = hex[s&15]
			s >>= 4
		}
	}
}

// mismatch compares chunk with the bytes of message s (whose sequence field is seq) at offset
// off, and returns the offset of the first difference, or -1.
func (m *message) mismatch(seq []byte, off int, chunk []byte) int {
	if off+len(chunk) > len(m.data) {
		return max(off, len(m.data))
	}
	i := 0
	for ; off+i < m.seqLen && i < len(chunk); i++ {
		if chunk[i] != seq[off+i] {
			return off + i
		}
	}
	rest := chunk[i:]
	want := m.data[off+i : off+i+len(rest)]
	if string(rest) == string(want) {
		return -1
	}
	for j := range rest {
		if rest[j] != want[j] {
			return off + i + j
		}
	}
	return -1
}
