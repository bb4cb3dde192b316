package gust

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The fuzz targets run a server-side Conn's ReadLoop over arbitrary bytes,
// served by fuzzConn in pieces of random size, and check the promises the
// package doc and Event make: no panic, OnOpen and OnClose exactly once, text
// messages valid UTF-8, no message byte that did not come from the input, the
// close codes the RFC names, and well-formed (unmasked) frames in answer.
//
// Seeds live in testdata/fuzz/<FuzzName>/ and run as ordinary tests.

// fuzzConn is an in-memory net.Conn: Read serves in in pieces of 1 to 2×step
// bytes chosen by rng, then io.EOF; Write records what the Conn sends.
type fuzzConn struct {
	in   []byte
	rng  *rand.Rand
	step int

	mu  sync.Mutex
	out bytes.Buffer
}

func (f *fuzzConn) Read(p []byte) (int, error) {
	if len(f.in) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(f.in), 1+f.rng.IntN(2*f.step))
	copy(p, f.in[:n])
	f.in = f.in[n:]
	return n, nil
}

func (f *fuzzConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.Write(p)
}

func (f *fuzzConn) Close() error                     { return nil }
func (f *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (f *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (f *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzRecorder records every callback and checks each message as it comes.
type fuzzRecorder struct {
	BuiltinEventHandler // OnPing answers with a pong
	t                   *testing.T
	opens, closes       int
	err                 error
	msgBytes            int
	msgs                int
	pings               [][]byte
}

func (h *fuzzRecorder) OnOpen(*Conn) { h.opens++ }

func (h *fuzzRecorder) OnClose(_ *Conn, err error) {
	h.closes++
	h.err = err
}

func (h *fuzzRecorder) OnPing(c *Conn, p []byte) {
	h.pings = append(h.pings, bytes.Clone(p))
	h.BuiltinEventHandler.OnPing(c, p)
}

func (h *fuzzRecorder) OnMessage(_ *Conn, m *Message) {
	require.Contains(h.t, []Opcode{OpText, OpBinary}, m.Opcode)
	if m.Opcode == OpText {
		require.True(h.t, utf8.Valid(m.Data), "OnMessage got invalid UTF-8 text %q", m.Data)
	}
	require.LessOrEqual(h.t, len(m.Data), fuzzMaxMessage)
	h.msgBytes += len(m.Data)
	h.msgs++
	m.Close()
}

const fuzzMaxMessage = 1 << 16

// parseFrames splits b into frames, and fails on a truncated one.
func parseFrames(b []byte) ([]wireFrame, error) {
	var out []wireFrame
	for r := bytes.NewReader(b); r.Len() > 0; {
		f, err := readWireFrame(r)
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// runFuzzConn runs a server-side Conn over in, its reads cut by seed.
func runFuzzConn(t *testing.T, in []byte, seed uint64, opts Options) (*fuzzRecorder, []wireFrame) {
	h, out := runFuzzConnOut(t, in, seed, opts)
	frames, err := parseFrames(out)
	require.NoError(t, err, "the Conn wrote a malformed frame stream: % x", out)
	return h, frames
}

// runFuzzConnOut is runFuzzConn, returning the bytes written.
func runFuzzConnOut(t *testing.T, in []byte, seed uint64, opts Options) (*fuzzRecorder, []byte) {
	rng := rand.New(rand.NewPCG(seed, uint64(len(in))))
	steps := []int{1, 7, 64, 1024, 1 << 16}
	fc := &fuzzConn{in: bytes.Clone(in), rng: rng, step: steps[seed%uint64(len(steps))]}
	h := &fuzzRecorder{t: t}
	opts.MaxMessageSize = fuzzMaxMessage
	opts.DisableRecovery = true // a panic must reach the fuzzer, not become a 1011
	c := newConn(fc, newConfig(opts, true), h, true, nil, "")
	c.ReadLoop()
	require.Equal(t, 1, h.opens, "OnOpen calls")
	require.Equal(t, 1, h.closes, "OnClose calls")
	return h, fc.out.Bytes()
}

func FuzzReadFrames(f *testing.F) {
	// More seeds in testdata/fuzz/FuzzReadFrames.
	f.Add(frame(0x81, []byte("hello")), uint64(0))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		// Reads of 512 bytes make every frame over 256 bytes take the path
		// that reads straight into the message.
		var opts Options
		if seed&8 != 0 {
			opts.ReadBufferSize = minReadBufferSize
		}
		h, frames := runFuzzConn(t, in, seed, opts)

		require.LessOrEqual(t, h.msgBytes, len(in), "message bytes that were not in the input")
		// Netpoll mode's event loops parse the same bytes in pieces,
		// resuming at each: the outcome must not change.
		_, out := runFuzzConnOut(t, in, seed, opts)
		fuzzLoopAgrees(t, in, seed, opts, h, out)

		var pongs [][]byte
		var closes []wireFrame
		for _, fr := range frames {
			require.False(t, fr.masked, "server frames are not masked")
			require.Equal(t, byte(0x80), fr.b0&0xf0, "FIN set, RSV bits clear")
			switch Opcode(fr.b0 & 0x0f) {
			case opPong:
				pongs = append(pongs, fr.payload)
			case opClose:
				closes = append(closes, fr)
			default:
				t.Fatalf("the Conn sent an unprompted frame %#x", fr.b0)
			}
		}
		// BuiltinEventHandler.OnPing answers every ping, in order.
		require.Equal(t, len(h.pings), len(pongs), "one pong per ping")
		for i := range pongs {
			require.Equal(t, h.pings[i], pongs[i])
		}
		require.LessOrEqual(t, len(closes), 1, "at most one close frame")

		var pe *ProtocolError
		var ce *CloseError
		switch {
		case errors.As(h.err, &pe):
			require.Contains(t, []StatusCode{StatusProtocolError, StatusInvalidFramePayloadData, StatusMessageTooBig},
				pe.Code, "ProtocolError %v", pe)
			require.Len(t, closes, 1, "a protocol error is answered with a close frame")
			require.Equal(t, pe.Code, StatusCode(binary.BigEndian.Uint16(closes[0].payload)))
		case errors.As(h.err, &ce):
			if ce.Code == StatusNoStatusReceived {
				require.Empty(t, ce.Reason)
			} else {
				require.True(t, ce.Code.validOnWire(), "CloseError with code %d", ce.Code)
			}
			require.True(t, utf8.ValidString(ce.Reason))
			require.Len(t, closes, 1, "the peer's close is answered")
			if ce.Code == StatusNoStatusReceived {
				require.Empty(t, closes[0].payload)
			} else {
				require.Equal(t, ce.Code, StatusCode(binary.BigEndian.Uint16(closes[0].payload)))
			}
		default:
			// The input ran out: before a frame, in a header or in a payload.
			require.True(t, errors.Is(h.err, io.EOF) || errors.Is(h.err, io.ErrUnexpectedEOF),
				"unexpected OnClose error %v", h.err)
			require.Empty(t, closes, "no close frame when the input just ends")
		}
	})
}

// FuzzCloseFrame checks readState.closeFrame against an oracle written from RFC 6455
// §5.5.1 and §7.4: every close payload of up to 125 bytes gets the verdict
// the RFC gives, and a valid one is echoed with its code.
func FuzzCloseFrame(f *testing.F) {
	// More seeds in testdata/fuzz/FuzzCloseFrame.
	f.Add([]byte{0x03, 0xe8}, false)
	f.Fuzz(func(t *testing.T, p []byte, skipUTF8 bool) {
		if len(p) > maxControlPayload {
			p = p[:maxControlPayload]
		}
		h, frames := runFuzzConn(t, frame(0x88, p), uint64(len(p)), Options{SkipUTF8Validation: skipUTF8})

		wantCode, wantProto := StatusNoStatusReceived, StatusCode(0)
		if len(p) == 1 {
			wantProto = StatusProtocolError
		} else if len(p) >= 2 {
			wantCode = StatusCode(binary.BigEndian.Uint16(p))
			valid := (wantCode >= 1000 && wantCode <= 1003) || (wantCode >= 1007 && wantCode <= 1014) ||
				(wantCode >= 3000 && wantCode <= 4999)
			switch {
			case !valid:
				wantProto = StatusProtocolError
			case !skipUTF8 && !utf8.Valid(p[2:]):
				wantProto = StatusInvalidFramePayloadData
			}
		}

		require.Len(t, frames, 1, "one close frame in answer")
		require.Equal(t, byte(0x88), frames[0].b0)
		if wantProto != 0 {
			var pe *ProtocolError
			require.ErrorAs(t, h.err, &pe)
			require.Equal(t, wantProto, pe.Code)
			require.Equal(t, wantProto, StatusCode(binary.BigEndian.Uint16(frames[0].payload)))
			return
		}
		var ce *CloseError
		require.ErrorAs(t, h.err, &ce)
		require.Equal(t, wantCode, ce.Code)
		if len(p) >= 2 {
			require.Equal(t, string(p[2:]), ce.Reason)
			require.Equal(t, p[:2], frames[0].payload, "the close is echoed with its code and no reason")
		} else {
			require.Empty(t, ce.Reason)
			require.Empty(t, frames[0].payload, "an empty close is echoed empty")
		}
	})
}
