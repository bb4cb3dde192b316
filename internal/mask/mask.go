// Package mask implements the WebSocket masking transform of RFC 6455
// section 5.3: every payload byte i is XORed with byte (i mod 4) of a 4-byte
// masking key. Masking and unmasking are the same operation.
//
// The functions take the key position of the first byte and return the
// position for the byte that follows, so a payload that arrives (or is
// written) in pieces can be processed piece by piece.
package mask

import "encoding/binary"

// Apply XORs b in place with key, where pos (any non-negative int, used
// modulo 4) is the index of the key byte that applies to b[0]. It returns
// (pos+len(b)) & 3, the key position for the byte after b, so calls can be
// chained over a payload split into pieces.
func Apply(b []byte, key [4]byte, pos int) int {
	return ApplyCopy(b, b, key, pos)
}

// ApplyCopy sets dst[i] = src[i] ^ key[(pos+i)&3] for every index of src.
// dst must be at least as long as src; it may be the same slice as src
// (that is what [Apply] does) but must not otherwise overlap it. The return
// value is (pos+len(src)) & 3, as for Apply.
func ApplyCopy(dst, src []byte, key [4]byte, pos int) int {
	pos &= 3
	n := len(src)
	next := (pos + n) & 3
	if n == 0 {
		return next
	}
	dst = dst[:n] // one bounds check up front; panics if dst is too short

	if n < 8 {
		for i := range src {
			dst[i] = src[i] ^ key[(pos+i)&3]
		}
		return next
	}

	// Rotate the key so that its byte 0 applies to src[0], then widen it to
	// 64 bits in the byte order the little-endian loads below use.
	k32 := uint32(key[pos&3]) | uint32(key[(pos+1)&3])<<8 |
		uint32(key[(pos+2)&3])<<16 | uint32(key[(pos+3)&3])<<24
	k64 := uint64(k32) | uint64(k32)<<32

	// Blocks of 64 bytes (SSE2 on amd64, eight-byte words elsewhere), then
	// words. Every step is a multiple of 4 bytes, so the rotated key stays
	// aligned with the payload.
	i := n &^ 63
	if i > 0 {
		xorKey64(&dst[0], &src[0], i, k64)
	}
	for ; n-i >= 8; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:i+8], binary.LittleEndian.Uint64(src[i:i+8])^k64)
	}
	// Tail: fewer than 8 bytes left, starting at a multiple of 8 (so at key
	// byte 0 of the rotated key).
	for ; i < n; i++ {
		dst[i] = src[i] ^ byte(k32>>(8*(i&3)))
	}
	return next
}
