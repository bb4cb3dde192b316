package gust

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEchoSizes(t *testing.T) {
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, nil)
		c := dialRaw(t, addr, nil)
		for _, n := range []int{0, 1, 125, 126, 127, 4095, 65535, 65536, 1 << 20} {
			p := repeat("a", n)
			c.send(frame(0x81, p))
			c.expectMessage(OpText, p)
			c.send(frame(0x82, p))
			c.expectMessage(OpBinary, p)
		}
		c.send(frame(0x88, closePayload(StatusNormalClosure, "bye")))
		c.expectClose(StatusNormalClosure)
		var ce *CloseError
		require.ErrorAs(t, h.waitClose(t), &ce)
		require.Equal(t, StatusNormalClosure, ce.Code)
		require.Equal(t, "bye", ce.Reason)
	})
}

func TestFragmentsWithInterleavedControl(t *testing.T) {
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		c := dialRaw(t, m.start(t, h, nil), nil)
		c.send(frame(0x01, []byte("Hel")), frame(0x89, []byte("ping!")), frame(0x00, []byte("lo, ")),
			frame(0x00, nil), frame(0x80, []byte("wörld")))
		b0, p, err := c.readFrame()
		require.NoError(t, err)
		require.Equal(t, byte(0x8A), b0)
		require.Equal(t, "ping!", string(p))
		c.expectMessage(OpText, []byte("Hello, wörld"))
	})
}

func TestHandshakeBytesAfterRequestAreKept(t *testing.T) {
	forEachMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		first := append(frame(0x81, []byte("one")), frame(0x82, []byte("two"))...)
		c := dialRaw(t, m.start(t, h, nil), first)
		c.expectMessage(OpText, []byte("one"))
		c.expectMessage(OpBinary, []byte("two"))
	})
}

func closePayload(code StatusCode, reason string) []byte {
	p := binary.BigEndian.AppendUint16(nil, uint16(code))
	return append(p, reason...)
}

func TestBadFramesGetTheRFCsCloseCode(t *testing.T) {
	big := make([]byte, 10)
	big[0] = 0x82
	big[1] = 0x80 | 127
	binary.BigEndian.PutUint64(big[2:], 1<<63)
	tests := []struct {
		name string
		send [][]byte
		code StatusCode
		kind string // "protocol" or "close"
	}{
		{"reserved bit 1", [][]byte{frame(0xC1, []byte("x"))}, StatusProtocolError, "protocol"},
		{"reserved bit 3", [][]byte{frame(0x91, []byte("x"))}, StatusProtocolError, "protocol"},
		{"reserved opcode 3", [][]byte{frame(0x83, nil)}, StatusProtocolError, "protocol"},
		{"reserved opcode 11", [][]byte{frame(0x8B, nil)}, StatusProtocolError, "protocol"},
		{"unmasked frame", [][]byte{encodeFrame(0x81, []byte("x"), false)}, StatusProtocolError, "protocol"},
		{"fragmented ping", [][]byte{frame(0x09, []byte("x"))}, StatusProtocolError, "protocol"},
		{"ping over 125", [][]byte{frame(0x89, make([]byte, 126))}, StatusProtocolError, "protocol"},
		{"continuation first", [][]byte{frame(0x80, []byte("x"))}, StatusProtocolError, "protocol"},
		{"text inside fragments", [][]byte{frame(0x01, []byte("a")), frame(0x81, []byte("b"))}, StatusProtocolError, "protocol"},
		{"length with MSB set", [][]byte{append(big, 1, 2, 3, 4)}, StatusProtocolError, "protocol"},
		{"close of one byte", [][]byte{frame(0x88, []byte{3})}, StatusProtocolError, "protocol"},
		{"close code 999", [][]byte{frame(0x88, closePayload(999, ""))}, StatusProtocolError, "protocol"},
		{"close code 1005", [][]byte{frame(0x88, closePayload(1005, ""))}, StatusProtocolError, "protocol"},
		{"close code 5000", [][]byte{frame(0x88, closePayload(5000, ""))}, StatusProtocolError, "protocol"},
		{"close reason bad UTF-8", [][]byte{frame(0x88, closePayload(1000, "\xff"))}, StatusInvalidFramePayloadData, "protocol"},
		{"text bad UTF-8", [][]byte{frame(0x81, []byte("ok\xc0\xafno"))}, StatusInvalidFramePayloadData, "protocol"},
		{"text truncated UTF-8", [][]byte{frame(0x81, []byte("\xe2\x82"))}, StatusInvalidFramePayloadData, "protocol"},
		{"fragment bad UTF-8", [][]byte{frame(0x01, []byte("\xce")), frame(0x80, []byte("\xffx"))}, StatusInvalidFramePayloadData, "protocol"},
		{"too big", [][]byte{frame(0x82, make([]byte, 1025))}, StatusMessageTooBig, "protocol"},
		{"too big in fragments", [][]byte{frame(0x02, make([]byte, 600)), frame(0x80, make([]byte, 600))}, StatusMessageTooBig, "protocol"},
		{"close 1000", [][]byte{frame(0x88, closePayload(1000, ""))}, StatusNormalClosure, "close"},
		{"close 4999", [][]byte{frame(0x88, closePayload(4999, "app"))}, 4999, "close"},
		{"close empty", [][]byte{frame(0x88, nil)}, StatusNoStatusReceived, "close"},
	}
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, &Options{MaxMessageSize: 1024})
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c := dialRaw(t, addr, nil)
				c.send(tt.send...)
				c.expectClose(tt.code)
				err := h.waitClose(t)
				switch tt.kind {
				case "protocol":
					var pe *ProtocolError
					require.ErrorAs(t, err, &pe)
					require.Equal(t, tt.code, pe.Code)
				case "close":
					require.Equal(t, tt.code, CloseStatus(err))
				}
			})
		}
	})
}

// TestUTF8FailsFast checks that invalid text is refused as soon as the bad
// byte arrives, before the rest of the frame.
func TestUTF8FailsFast(t *testing.T) {
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		c := dialRaw(t, m.start(t, h, nil), nil)
		f := frame(0x81, append([]byte("abc\xed\xa0\x80"), repeat("z", 100)...))
		c.send(f[:2+4+5]) // header, key and "abc\xed\xa0": the surrogate is already certain
		c.expectClose(StatusInvalidFramePayloadData)
		require.True(t, errors.As(h.waitClose(t), new(*ProtocolError)))
	})
}
