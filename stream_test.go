package gust

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// streamed is a message a streamHandler read to its end.
type streamed struct {
	op       Opcode
	data     []byte
	streamed bool
	err      error
}

// newStreamRecorder is a recorder whose handler reads every message with
// Read, whole or streamed, and records what it read.
func newStreamRecorder() (*recorder, chan streamed) {
	got := make(chan streamed, recorderRoom)
	h := newRecorder()
	h.message = func(c *Conn, m *Message) {
		data, err := io.ReadAll(m)
		got <- streamed{m.Opcode, data, m.Streamed(), err}
		m.Close()
	}
	return h, got
}

func waitStreamed(t *testing.T, got chan streamed) streamed {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no message")
		return streamed{}
	}
}

// streamPair connects a gust client to a gust server, both with opts, and
// returns the client, the server's side of the connection and what each
// side's streaming handler reads.
func streamPair(t *testing.T, opts Options) (client, server *Conn, fromClient, fromServer chan streamed) {
	t.Helper()
	sh, fromClient := newStreamRecorder()
	addr := startServer(t, sh, &opts)
	ch, fromServer := newStreamRecorder()
	client, _, err := Dial(testContext(t), "ws://"+addr, ch, &DialOptions{Options: opts})
	require.NoError(t, err)
	runClient(t, client)
	return client, sh.waitOpen(t), fromClient, fromServer
}

// textOf returns n bytes of valid UTF-8 (ASCII and 2-byte runes, so that
// fragments split runes) that compress somewhat.
func textOf(r *rand.Rand, n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		if n-len(b) >= 2 && r.IntN(8) == 0 {
			b = append(b, "é"...)
		} else {
			b = append(b, byte('a'+r.IntN(20)))
		}
	}
	return b
}

func payloadOf(r *rand.Rand, op Opcode, n int) []byte {
	if op == OpText {
		return textOf(r, n)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sendInPieces sends p through NextWriter in writes of random sizes.
func sendInPieces(r *rand.Rand, c *Conn, op Opcode, p []byte) error {
	w, err := c.NextWriter(op)
	if err != nil {
		return err
	}
	for len(p) > 0 {
		k := min(len(p), 1+r.IntN(40<<10))
		if _, err := w.Write(p[:k]); err != nil {
			w.Close()
			return err
		}
		p = p[k:]
	}
	return w.Close()
}

func TestStreamRoundTrip(t *testing.T) {
	t.Parallel()
	const threshold = 4 << 10
	for _, compress := range []bool{false, true} {
		for _, parallel := range []int{0, 4} {
			t.Run(fmt.Sprintf("compress=%v/parallel=%d", compress, parallel), func(t *testing.T) {
				t.Parallel()
				opts := Options{StreamThreshold: threshold, Parallel: parallel, WriteBufferSize: 16 << 10}
				opts.Compression.Enabled = compress
				client, server, fromClient, fromServer := streamPair(t, opts)
				require.Equal(t, compress, client.Compressed())
				r := rand.New(rand.NewPCG(1, 2))
				for _, size := range []int{0, 100, threshold - 1, threshold, threshold + 1, 3*(16<<10) + 17, 300 << 10} {
					for _, op := range []Opcode{OpText, OpBinary} {
						for _, how := range []string{"WriteMessage", "NextWriter", "WriteFrom"} {
							p := payloadOf(r, op, size)
							for _, side := range []struct {
								name string
								from *Conn
								got  chan streamed
							}{{"client", client, fromClient}, {"server", server, fromServer}} {
								var err error
								switch how {
								case "WriteMessage":
									err = side.from.WriteMessage(op, p)
								case "NextWriter":
									err = sendInPieces(r, side.from, op, p)
								case "WriteFrom":
									var n int64
									n, err = side.from.WriteFrom(op, bytes.NewReader(p))
									require.Equal(t, int64(size), n)
								}
								require.NoError(t, err)
								s := waitStreamed(t, side.got)
								where := fmt.Sprintf("%s from the %s, %v, %d bytes", how, side.name, op, size)
								require.NoError(t, s.err, where)
								require.Equal(t, op, s.op, where)
								require.True(t, bytes.Equal(p, s.data), where)
								if size > threshold {
									require.True(t, s.streamed, where)
								} else if !compress || size < threshold/2 {
									require.False(t, s.streamed, where)
								}
							}
						}
					}
				}
			})
		}
	}
}

// TestStreamCompressedSmallOnTheWire: a message that compresses below the
// threshold and inflates past it is streamed too, and the window stays in
// step for the next message.
func TestStreamCompressedSmallOnTheWire(t *testing.T) {
	t.Parallel()
	opts := Options{StreamThreshold: 64 << 10, MaxMessageSize: -1}
	opts.Compression.Enabled = true
	client, _, fromClient, _ := streamPair(t, opts)
	big := bytes.Repeat([]byte("abcdefgh"), 1<<20) // 8 MiB, a few KiB deflated
	require.NoError(t, client.WriteMessage(OpText, big))
	s := waitStreamed(t, fromClient)
	require.NoError(t, s.err)
	require.True(t, s.streamed)
	require.True(t, bytes.Equal(big, s.data))
	require.NoError(t, client.WriteMessage(OpText, big[:1000]))
	s = waitStreamed(t, fromClient)
	require.False(t, s.streamed)
	require.Equal(t, big[:1000], s.data)
}

var _ = errors.New
var _ = net.ErrClosed
