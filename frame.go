package gust

import (
	"crypto/rand"
	"encoding/binary"
)

// The frame codec (RFC 6455 §5.2): pure functions over bytes. The reader
// feeds parseFrameHeader what has arrived; the writers encode headers with
// putHeader, and a client's with a masking key from its maskSource.

// frameHeader is a frame's header, checked.
type frameHeader struct {
	op         Opcode
	fin        bool
	compressed bool // RSV1: the first frame of a compressed message
	key        [4]byte
	length     int64
}

// parseFrameHeader parses and checks the frame header at the start of b
// into h. It returns the header's length, or 0 and no error while b does
// not hold all of it; a bad header fails as soon as its first two bytes
// arrive. server says which side reads (only a client masks), deflate
// whether RSV1 may mark a compressed message (RFC 7692 §6).
func parseFrameHeader(b []byte, h *frameHeader, server, deflate bool) (int, error) {
	if len(b) < 2 {
		return 0, nil
	}
	*h = frameHeader{fin: b[0]&0x80 != 0, op: Opcode(b[0] & 0x0f)}
	masked := b[1]&0x80 != 0
	length := int64(b[1] & 0x7f)
	if rsv := b[0] & 0x70; rsv != 0 || masked != server || h.op > OpBinary {
		// Not an uncompressed data frame masked as it should be: check all.
		if err := checkFrameHeader(h, rsv, masked, length, server, deflate); err != nil {
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
			return 0, protocolError(StatusProtocolError, "payload length with the most significant bit set")
		}
		length = int64(u)
	}
	if masked {
		copy(h.key[:], b[hn-4:hn])
	}
	h.length = length
	return hn, nil
}

// checkFrameHeader checks what the first two bytes of a header say: the
// reserved bits rsv, the mask bit, the opcode and, for a control frame,
// fin and the 7-bit length. It sets h.compressed for RSV1.
func checkFrameHeader(h *frameHeader, rsv byte, masked bool, length int64, server, deflate bool) error {
	if rsv != 0 {
		if rsv != 0x40 || !deflate || (h.op != OpText && h.op != OpBinary) {
			return protocolError(StatusProtocolError, "reserved bits set")
		}
		h.compressed = true
	}
	if masked != server {
		if server {
			return protocolError(StatusProtocolError, "client frame not masked")
		}
		return protocolError(StatusProtocolError, "server frame masked")
	}
	switch h.op {
	case opContinuation, OpText, OpBinary:
	case opClose, opPing, opPong:
		if !h.fin {
			return protocolError(StatusProtocolError, "fragmented control frame")
		}
		if length > maxControlPayload {
			return protocolError(StatusProtocolError, "control frame payload over 125 bytes")
		}
	default:
		return protocolError(StatusProtocolError, "reserved opcode")
	}
	return nil
}

// Or-ed into an opcode for putHeader: rsv1 sets RSV1 (a compressed
// message), notFinal clears FIN (a fragment before the last).
const (
	rsv1     Opcode = 0x40
	notFinal Opcode = 0x80
)

// putHeader encodes a frame header into b, final unless op carries notFinal,
// and returns its length.
func putHeader(b []byte, op Opcode, n int, masked bool, key [4]byte) int {
	b[0] = byte(op) ^ 0x80 // FIN, unless op carries notFinal; op may carry rsv1
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

// maskSource makes client masking keys from crypto/rand, 16 per call:
// unpredictable (RFC 6455 §10.3) at little cost per frame.
type maskSource struct {
	buf [64]byte
	pos int
}

// maskKey returns the next masking key of a client's frame; the caller
// holds the write lock.
func (w *writeState) maskKey() [4]byte {
	if w.maskSource == nil {
		w.maskSource = new(maskSource)
	}
	return w.maskSource.next()
}

func (s *maskSource) next() [4]byte {
	if s.pos == 0 || s.pos == len(s.buf) {
		rand.Read(s.buf[:])
		s.pos = 0
	}
	var k [4]byte
	copy(k[:], s.buf[s.pos:])
	s.pos += 4
	return k
}
