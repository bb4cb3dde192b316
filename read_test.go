package gust

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/testkit"
)

func TestEchoSizes(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		c := dialRaw(t, m.start(t, h, nil), nil)
		f := frame(0x81, append([]byte("abc\xed\xa0\x80"), repeat("z", 100)...))
		c.send(f[:2+4+5]) // header, key and "abc\xed\xa0": the surrogate is already certain
		c.expectClose(StatusInvalidFramePayloadData)
		require.True(t, errors.As(h.waitClose(t), new(*ProtocolError)))
	})
}

func TestLargeFragmentedMessagesReadStraightIntoTheMessage(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		c := dialRaw(t, m.start(t, h, &Options{ReadBufferSize: 512}), nil)
		var want []byte
		for i := 0; i < 4; i++ {
			p := bytes.Repeat([]byte{'a' + byte(i)}, 10<<10)
			want = append(want, p...)
			b0 := byte(0x00)
			if i == 0 {
				b0 = 0x01
			}
			if i == 3 {
				b0 |= 0x80
			}
			f := frame(b0, p)
			c.send(f[:20], f[20:]) // the header arrives before most of the payload
			time.Sleep(2 * time.Millisecond)
		}
		c.expectMessage(OpText, want)
	})
}

// TestLargeFrameInPieces: a 1 MiB frame arriving a few KiB at a time is
// read whole, the first time by growing its buffer with the bytes that
// arrived, the next times into a buffer of the frame's size the pool holds
// already (the first message's, given back by the echo).
func TestLargeFrameInPieces(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		c := dialRaw(t, m.start(t, h, nil), nil)
		want := patterned(1<<20 + 3)
		f := frame(0x82, want)
		for range 3 {
			for rest := f; len(rest) > 0; {
				n := min(len(rest), 96<<10+17)
				c.send(rest[:n])
				rest = rest[n:]
				time.Sleep(time.Millisecond)
			}
			c.expectMessage(OpBinary, want)
		}
	})
}

func TestPeerResetEndsTheConnection(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		c := dialRaw(t, m.start(t, h, nil), nil)
		c.send(frame(0x82, []byte("one")))
		require.Equal(t, []byte("one"), h.waitMessage(t).data)
		require.NoError(t, tcpOf(c.nc).SetLinger(0))
		tcpOf(c.nc).Close() // under TLS, without a close_notify first
		err := h.waitClose(t)
		require.ErrorIs(t, err, syscall.ECONNRESET)
		var oe *net.OpError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "read", oe.Op)
	})
}

func TestEOFInsidePayloadIsUnexpected(t *testing.T) {
	t.Parallel()
	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		c := dialRaw(t, m.start(t, h, nil), nil)
		f := frame(0x82, []byte("0123456789"))
		c.send(f[:len(f)-7])
		time.Sleep(5 * time.Millisecond)
		tcpOf(c.nc).CloseWrite()
		require.ErrorIs(t, h.waitClose(t), io.ErrUnexpectedEOF)
	})
}

// TestLengthOverflowInContinuation: a continuation frame whose 64-bit
// length, added to the bytes of the message so far, overflows int64 must be
// refused with 1009 like any other message over the limit.
func TestLengthOverflowInContinuation(t *testing.T) {
	t.Parallel()
	head := binary.BigEndian.AppendUint64([]byte{0x80, 0x80 | 127}, 1<<63-1)
	in := append(frame(0x02, []byte("a")), append(head, 1, 2, 3, 4)...)

	h, frames := runFuzzConn(t, in, 0, Options{}) // DisableRecovery: a panic fails the test
	var pe *ProtocolError
	require.ErrorAs(t, h.err, &pe)
	require.Equal(t, StatusMessageTooBig, pe.Code)
	require.Len(t, frames, 1)

	forEachTCPMode(t, func(t *testing.T, m serverMode) {
		var logged testkit.Buffer
		h := newEcho()
		c := dialRaw(t, m.start(t, h, &Options{Logger: newLogger(&logged)}), nil)
		c.send(in)
		c.expectClose(StatusMessageTooBig)
		require.ErrorAs(t, h.waitClose(t), &pe)
		require.Equal(t, StatusMessageTooBig, pe.Code)
		require.Empty(t, logged.String())
	})
}

// TestTruncatedFrames: input that ends between frames is a plain io.EOF;
// input that ends inside a frame, wherever in it, is io.ErrUnexpectedEOF,
// as noEOF's comment in reader.go promises ("an EOF in the middle of a
// frame").
func TestTruncatedFrames(t *testing.T) {
	t.Parallel()
	ping := frame(0x89, []byte("hello"))
	long := frame(0x82, make([]byte, 300))
	for _, tt := range []struct {
		name string
		in   []byte
		want error
	}{
		{"between frames", frame(0x82, []byte("x")), io.EOF},
		{"no input", nil, io.EOF},
		{"inside the data payload", long[:20], io.ErrUnexpectedEOF},
		{"after one header byte", ping[:1], io.ErrUnexpectedEOF},
		{"inside the 16-bit length", long[:3], io.ErrUnexpectedEOF},
		{"inside the masking key", ping[:4], io.ErrUnexpectedEOF},
		{"inside the ping payload", ping[:8], io.ErrUnexpectedEOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for seed := uint64(0); seed < 5; seed++ { // several ways to cut the reads
				h, frames := runFuzzConn(t, tt.in, seed, Options{})
				require.Equal(t, tt.want, h.err)
				require.Empty(t, frames)
			}
		})
	}
}
