package gust

import (
	"math"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/mask"
)

// The parser: what the bytes read so far make of the frame in progress, a
// function of those bytes and the read state (readState) alone. Conn.parse
// drives it and dispatches what it completes (read.go).

// maxEmptyFrames bounds the empty frames before the last one of a message:
// they carry nothing, and a peer that sends them without end would keep
// the connection busy and its message open for ever.
const maxEmptyFrames = 1 << 10

// growMessage makes room in the message buffer for the bytes that have
// arrived (rd.buf[r:w]) and more: about twice the message so far, never
// what a header announces, so that a peer that announces 16 MiB and sends
// 1 KiB holds about 1 KiB, and a message in many pieces grows
// geometrically, in linear time. The last frame's end bounds the size;
// before it, the size limit does, and the stream threshold past which the
// message is streamed.
func (rd *readState) growMessage(fin bool, end int, limit int64, threshold int) {
	size := max(2*rd.n, rd.n+rd.w-rd.r)
	if fin {
		size = min(size, end)
	} else {
		size = int(min(int64(size), limit))
		if threshold > 0 {
			size = min(size, threshold)
		}
	}
	if fin && size < end {
		// A buffer for the whole frame that the pool already holds commits
		// no new memory: take it rather than grow to it by doubling,
		// copying the message at each step.
		if nb := bufpool.TryGet(end); nb != nil {
			if rd.msg != nil {
				copy(*nb, (*rd.msg)[:rd.n])
				bufpool.Put(rd.msg)
			}
			rd.msg = nb
			return
		}
	}
	rd.msg = bufpool.Grow(rd.msg, size)
}

// countEmpty counts h, the header of a data frame of the message in
// progress, if it is empty and not the last (maxEmptyFrames).
func (rd *readState) countEmpty(h *frameHeader) error {
	if h.Length > 0 || h.Fin {
		return nil
	}
	if rd.empty++; rd.empty > maxEmptyFrames {
		return protocolError(StatusPolicyViolation, "more than 1024 empty frames in one message")
	}
	return nil
}

// want is what the parser needs to go on when it stops without an error.
type want uint8

const (
	wantBytes     want = iota + 1 // more bytes, into the read buffer (fill)
	wantPayload                   // more of a large payload, read straight into the message buffer at rd.n
	wantGoroutine                 // nothing: what comes next may wait, which an event loop must not
	wantEnd                       // nothing: the peer's close frame, which ends the connection off the loop
)

// unmask copies src to dst, unmasking on the server side; it returns the
// next key position.
func unmask(server bool, dst, src []byte, key [4]byte, pos int) int {
	if server {
		return mask.ApplyCopy(dst, src, key, pos)
	}
	copy(dst, src)
	return pos
}

// beginData takes the data frame h into the message: it starts one, or
// continues the one in progress, and checks the limits.
func (rd *readState) beginData(h *frameHeader, cfg *config) error {
	if h.Op == opContinuation {
		if rd.op == 0 {
			return protocolError(StatusProtocolError, "continuation frame without a message")
		}
	} else {
		if rd.op != 0 {
			return protocolError(StatusProtocolError, "new message inside a fragmented message")
		}
		rd.op = h.Op
		rd.n = 0
		rd.empty = 0
		rd.compressed = h.Compressed
		rd.utf8.Reset()
	}
	if err := rd.countEmpty(h); err != nil {
		return err
	}
	if h.Length > cfg.wireLimit(rd.compressed)-int64(rd.n) { // not rd.n+length: that can wrap
		return protocolError(StatusMessageTooBig, "message over the size limit")
	}
	threshold := cfg.StreamThreshold
	rd.stream = threshold > 0 && h.Length > int64(threshold-rd.n)
	rd.end = rd.n + int(h.Length)
	rd.begun = true
	return nil
}

// parsePayload takes the payload of the frame h into the message, as far
// as the bytes go: those a read put straight into the message buffer
// (rd.direct), then the read buffer's. It keeps its place in rd (n, pos)
// when it wants more.
func (rd *readState) parsePayload(h *frameHeader, server bool, cfg *config) (want, error) {
	fin, end, key := h.Fin, rd.end, h.Key
	checkText := rd.op == OpText && !cfg.SkipUTF8Validation && !rd.compressed
	pos := int(rd.pos)
	if k := int(rd.direct); k > 0 {
		rd.direct = 0
		dst := (*rd.msg)[rd.n : rd.n+k]
		if server {
			pos = mask.Apply(dst, key, pos)
		}
		rd.n += k
		if checkText && !rd.utf8.Feed(dst) {
			return 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		}
	}
	for rd.n < end {
		avail := rd.w - rd.r
		if rd.msg == nil || len(*rd.msg) == rd.n {
			if avail == 0 {
				// Memory follows the bytes that arrived, from the first:
				// a buffer for the message is taken once some have.
				rd.pos = uint8(pos)
				return wantBytes, nil
			}
			rd.growMessage(fin, end, cfg.wireLimit(rd.compressed), cfg.StreamThreshold)
		}
		dst := (*rd.msg)[rd.n:min(end, len(*rd.msg))]
		if avail == 0 {
			rd.pos = uint8(pos)
			if len(dst) >= cfg.ReadBufferSize/2 {
				return wantPayload, nil // large and nothing buffered: read straight into the message
			}
			return wantBytes, nil
		}
		dst = dst[:min(avail, len(dst))]
		pos = unmask(server, dst, (*rd.buf)[rd.r:rd.r+len(dst)], key, pos)
		rd.r += len(dst)
		rd.n += len(dst)
		if checkText && !rd.utf8.Feed(dst) {
			return 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		}
	}
	rd.pos = uint8(pos)
	return 0, nil
}

// maxMessageSize is Options.MaxMessageSize, math.MaxInt for no limit.
func (cfg *config) maxMessageSize() int64 {
	limit := cfg.MaxMessageSize
	if limit < 0 || limit > math.MaxInt {
		limit = math.MaxInt
	}
	return limit
}

// wireLimit is the most a message may take on the wire: MaxMessageSize,
// which counts the message as the handler gets it, and for a compressed
// one deflate's worst case on top, since bytes that do not compress grow
// a little (by 5 bytes in 64 KiB in stored blocks, by up to an eighth in
// fixed Huffman codes): the limit plus an eighth plus 256 bytes. The
// inflated bytes are held to MaxMessageSize as they come out.
func (cfg *config) wireLimit(compressed bool) int64 {
	limit := cfg.maxMessageSize()
	if !compressed {
		return limit
	}
	if limit > (math.MaxInt-256)/9*8 {
		return math.MaxInt
	}
	return limit + limit/8 + 256
}

// isTooBig reports whether err is gust failing a message over the size
// limit.
func isTooBig(err error) bool {
	pe, ok := err.(*ProtocolError)
	return ok && pe.Code == StatusMessageTooBig
}

func protocolError(code StatusCode, reason string) error {
	return &ProtocolError{Code: code, Reason: reason}
}
