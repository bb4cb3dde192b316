package gust

import "github.com/gustws/gust/internal/wsframe"

// The frame codec is internal/wsframe: pure functions over bytes. The reader
// feeds parseFrameHeader what has arrived; the writers encode headers with
// wsframe.Put, and a client's with a masking key from its wsframe.KeySource.

// frameHeader is a frame's header, checked.
type frameHeader = wsframe.Header[Opcode]

// parseFrameHeader is wsframe.Parse, its errors made a *ProtocolError (1002).
func parseFrameHeader(b []byte, h *frameHeader, server, deflate bool) (int, error) {
	n, err := wsframe.Parse(b, h, server, deflate)
	if err != nil {
		return 0, protocolError(StatusProtocolError, err.Error())
	}
	return n, nil
}

// Or-ed into an opcode for wsframe.Put: rsv1 sets RSV1 (a compressed
// message), notFinal clears FIN (a fragment before the last).
const (
	rsv1     Opcode = 0x40
	notFinal Opcode = 0x80
)

// maskKey returns the next masking key of a client's frame; the caller
// holds the write lock.
func (w *writeState) maskKey() [4]byte {
	if w.maskSource == nil {
		w.maskSource = new(wsframe.KeySource)
	}
	return w.maskSource.Next()
}
