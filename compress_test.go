package gust

import (
	"bytes"
	"compress/flate"
	crand "crypto/rand"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestCompressionOptionsRFC checks how each side names its options in
// RFC 7692's terms: the plain fields are this side's, the Peer fields the
// other's.
func TestCompressionOptionsRFC(t *testing.T) {
	t.Parallel()
	o := CompressionOptions{Enabled: true, Level: 5, Threshold: 100, NoContextTakeover: true, WindowBits: 10, PeerWindowBits: 12}
	require.Equal(t, deflate.Config{Enabled: true, Level: 5, Threshold: 100, ServerNoContextTakeover: true,
		ServerMaxWindowBits: 10, ClientMaxWindowBits: 12}, o.rfc(true))
	require.Equal(t, deflate.Config{Enabled: true, Level: 5, Threshold: 100, ClientNoContextTakeover: true,
		ClientMaxWindowBits: 10, ServerMaxWindowBits: 12}, o.rfc(false))
	o = CompressionOptions{PeerNoContextTakeover: true, Level: 12, WindowBits: 16}
	require.Equal(t, deflate.Config{Level: 1, Threshold: deflate.DefaultThreshold, ClientNoContextTakeover: true,
		ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}, o.rfc(true))
}

// useDeflate gives c the compression state of a connection that negotiated
// p, with c's settings (Options.Compression, as the server sees them when
// server is set).
func useDeflate(c *Conn, p deflate.Params) {
	c.deflate = deflate.NewState(p, &c.cfg.deflate, c.server, &c.wr.mu)
}

func TestCompressedEcho(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		for _, offer := range []string{"permessage-deflate", "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			"permessage-deflate; server_max_window_bits=9", "permessage-deflate; server_max_window_bits=15"} {
			t.Run(offer, func(t *testing.T) {
				h := newEcho()
				addr := m.start(t, h, &Options{Compression: CompressionOptions{Enabled: true}})
				nc := dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: "+offer)
				// The server accepts each offer as it is: every parameter
				// answered, server_max_window_bits=15 included.
				require.Equal(t, offer, nc.lastResp.Header.Get("Sec-WebSocket-Extensions"))
				dc := testkit.NewDeflatePeer()
				sc := testkit.NewDeflatePeer()
				msgs := []string{
					strings.Repeat(`{"user":"ann","text":"hello there"}`, 60), // compressed both ways
					"short",                       // under the threshold: sent plain
					strings.Repeat("wörld ", 500), // reuses the window
				}
				for _, msg := range msgs {
					z := dc.Compress([]byte(msg))
					nc.send(frame(0xC1, z)) // FIN, RSV1, text
					b0, p, err := nc.readFrame()
					require.NoError(t, err)
					if len(msg) >= deflate.DefaultThreshold {
						require.Equal(t, byte(0xC1), b0, "RSV1 set on a compressed message")
						require.Equal(t, msg, string(sc.Decompress(t, p)))
					} else {
						require.Equal(t, byte(0x81), b0)
						require.Equal(t, msg, string(p))
					}
				}
				// A compressed message in fragments: RSV1 on the first frame only.
				z := dc.Compress([]byte(msgs[0]))
				nc.send(frame(0x41, z[:10]), frame(0x00, z[10:20]), frame(0x80, z[20:]))
				b0, p, err := nc.readFrame()
				require.NoError(t, err)
				require.Equal(t, byte(0xC1), b0)
				require.Equal(t, msgs[0], string(sc.Decompress(t, p)))
				// RSV1 on a continuation frame is a protocol error.
				nc.send(frame(0x41, z[:10]), frame(0xC0, z[10:]))
				nc.expectClose(StatusProtocolError)
			})
		}
	})
}

func TestRSV1WithoutNegotiationIsAnError(t *testing.T) {
	t.Parallel()
	h := newEcho()
	c := dialRaw(t, startServer(t, h, &Options{Compression: CompressionOptions{Enabled: true}}), nil)
	c.send(frame(0xC1, []byte{0x01, 0x02}))
	c.expectClose(StatusProtocolError)
}

func TestInflateBombClosesWith1009(t *testing.T) {
	// 64 MiB of zeros deflate to about 64 KiB; the limit is 1 MiB.
	bomb := testkit.DeflateBomb(64 << 20)
	require.Less(t, len(bomb), 1<<17)

	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newEcho()
		addr := m.start(t, h, &Options{MaxMessageSize: 1 << 20, Compression: CompressionOptions{Enabled: true}})
		nc := dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate")
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		nc.send(frame(0xC2, bomb))
		nc.expectClose(StatusMessageTooBig)
		var pe *ProtocolError
		require.ErrorAs(t, h.waitClose(t), &pe)
		require.Equal(t, StatusMessageTooBig, pe.Code)
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("bytes allocated while refusing a 64 MiB bomb: %d", allocated)
		require.Less(t, allocated, uint64(8<<20), "inflating stops at the limit, not at 64 MiB")
	})
}

func TestInvalidDeflateDataCloses(t *testing.T) {
	t.Parallel()
	h := newEcho()
	nc := dialRaw(t, startServer(t, h, &Options{Compression: CompressionOptions{Enabled: true}}), nil,
		"Sec-WebSocket-Extensions: permessage-deflate")
	nc.send(frame(0xC2, []byte{0xff, 0xff, 0xff, 0xff}))
	nc.expectClose(StatusInvalidFramePayloadData)
}

func TestCompressedInvalidUTF8(t *testing.T) {
	t.Parallel()
	h := newEcho()
	nc := dialRaw(t, startServer(t, h, &Options{Compression: CompressionOptions{Enabled: true}}), nil,
		"Sec-WebSocket-Extensions: permessage-deflate")
	dc := testkit.NewDeflatePeer()
	nc.send(frame(0xC1, dc.Compress([]byte("ok \xed\xa0\x80 no"))))
	nc.expectClose(StatusInvalidFramePayloadData)
}

func TestWriteUncompressed(t *testing.T) {
	t.Parallel()
	h := newRecorder()
	big := bytes.Repeat([]byte("z"), 4096)
	h.open = func(c *Conn) {
		require.True(t, c.Compressed())
		c.WriteUncompressed(OpBinary, big)
		c.WriteAsync(OpBinary, big, nil)
	}
	nc := dialRaw(t, startServer(t, h, &Options{Compression: CompressionOptions{Enabled: true}}), nil,
		"Sec-WebSocket-Extensions: permessage-deflate")
	nc.expectMessage(OpBinary, big)
	b0, p, err := nc.readFrame()
	require.NoError(t, err)
	require.Equal(t, byte(0xC2), b0)
	require.Equal(t, big, testkit.NewDeflatePeer().Decompress(t, p))
}

// TestCompressedBurstKeepsBudget has 40 connections each send a batch of
// compressed messages at once, in each server mode: at most the budget of
// compressors stays held between messages, the ones lent for a batch come
// back with it (EndBatch), every echo decodes on the client's side, and a
// message repeated in the next batch refers back whatever the connection
// kept. Not parallel: the counts are process-wide.
func TestCompressedBurstKeepsBudget(t *testing.T) {
	msgs := make([][]byte, 3)
	for i := range msgs {
		msgs[i] = fmt.Appendf(nil, `[%s]`, strings.Repeat(fmt.Sprintf(`{"n":%d,"user":"ann-%d","text":"hello there"},`, i, i*7), 25))
	}
	_, _, budget := deflate.Kept()
	for _, m := range serverModes {
		t.Run(m.name, func(t *testing.T) {
			h := newEcho()
			addr := m.start(t, h, &Options{Compression: CompressionOptions{Enabled: true}})
			const conns = 40
			clients := make([]*rawClient, conns)
			peers := make([]*testkit.DeflatePeer, conns)
			var batch []byte
			for _, msg := range msgs {
				batch = append(batch, frame(0xC1, testkit.NewDeflatePeer().Compress(msg))...)
			}
			for i := range clients {
				clients[i] = dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate")
				peers[i] = testkit.NewDeflatePeer()
			}
			for _, c := range clients {
				c.send(batch) // one write: one batch on the server
			}
			for i, c := range clients {
				for _, msg := range msgs {
					b0, p, err := c.readFrame()
					require.NoError(t, err)
					require.Equal(t, byte(0xC1), b0)
					require.Equal(t, msg, peers[i].Decompress(t, p), "conn %d", i)
				}
			}
			held, lent, _ := deflate.Kept()
			require.Zero(t, lent, "every batch gave back what it borrowed")
			require.LessOrEqual(t, held, budget)

			again := frame(0xC1, testkit.NewDeflatePeer().Compress(msgs[2]))
			for i, c := range clients {
				c.send(again)
				b0, p, err := c.readFrame()
				require.NoError(t, err)
				require.Equal(t, byte(0xC1), b0)
				require.Less(t, len(p), 50, "conn %d: the repeat refers back to its last batch", i)
				require.Equal(t, msgs[2], peers[i].Decompress(t, p))
			}
			for _, c := range clients {
				c.nc.Close()
			}
			for range clients {
				h.waitClose(t)
			}
		})
	}
}

// MaxMessageSize counts a compressed message as the handler gets it. Bytes
// that do not compress take more room on the wire than the limit and still
// pass, whole or in fragments, read whole or streamed; one byte more, once
// inflated, fails with 1009; so does a frame that announces more than the
// limit plus deflate's worst case, as soon as its header arrives.
func TestCompressedLimitCountsTheInflatedMessage(t *testing.T) {
	const limit = 64 << 10
	random := make([]byte, limit+1)
	crand.Read(random)
	sizes := []int{limit, limit + 1}
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		t.Parallel()
		for _, stream := range []int{0, 16 << 10} {
			for _, n := range sizes {
				for _, pieces := range []int{1, 3} {
					t.Run(fmt.Sprintf("stream=%d/size=%d/frames=%d", stream, n, pieces), func(t *testing.T) {
						got := make(chan []byte, 1)
						h := newRecorder()
						h.message = func(c *Conn, m *Message) {
							b, err := io.ReadAll(m)
							if err == nil {
								got <- b
							}
							m.Close()
						}
						addr := m.start(t, h, &Options{MaxMessageSize: limit, StreamThreshold: stream,
							Compression: CompressionOptions{Enabled: true}})
						nc := dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate")
						z := testkit.NewDeflatePeer().Compress(random[:n])
						require.Greater(t, len(z), limit, "random bytes grow under deflate")
						third := len(z) / 3
						if pieces == 1 {
							nc.send(frame(0xC2, z))
						} else {
							nc.send(frame(0x42, z[:third]), frame(0x00, z[third:2*third]), frame(0x80, z[2*third:]))
						}
						if n > limit {
							nc.expectClose(StatusMessageTooBig)
							requireCode(t, h.waitClose(t), StatusMessageTooBig)
							return
						}
						select {
						case b := <-got:
							require.True(t, bytes.Equal(random[:n], b), "the message as sent")
						case err := <-h.closed:
							t.Fatalf("closed instead of delivering the message: %v", err)
						case <-time.After(10 * time.Second):
							t.Fatal("no message")
						}
					})
				}
			}
			t.Run(fmt.Sprintf("stream=%d/announced past the wire bound", stream), func(t *testing.T) {
				h := newRecorder()
				addr := m.start(t, h, &Options{MaxMessageSize: limit, StreamThreshold: stream,
					Compression: CompressionOptions{Enabled: true}})
				nc := dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate")
				// The server may close on the header alone, before it reads the
				// rest (h2's stream then refuses it): that write's error is not
				// the test's.
				nc.nc.Write(append(header(0xC2, limit+limit/8+257, [4]byte{1, 2, 3, 4}), "abc"...))
				nc.expectClose(StatusMessageTooBig)
				requireCode(t, h.waitClose(t), StatusMessageTooBig)
			})
		}
	})
}

// jsonMessages are 2 KiB JSON documents, like API or chat payloads: the
// same shape with different values, so that context takeover helps as it
// does in real traffic, but not to the point of sending nothing.
var jsonMessages = func() [][]byte {
	var out [][]byte
	for m := 0; m < 64; m++ {
		var b bytes.Buffer
		b.WriteString(`{"events":[`)
		for i := 0; b.Len() < 2000; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			n := m*1000 + i
			fmt.Fprintf(&b, `{"id":%d,"user":"user-%d","room":"general","text":"message %x","ts":%d}`,
				n*7919, n%97, n*2654435761, 1700000000+n*17)
		}
		b.WriteString(`]}`)
		out = append(out, b.Bytes())
	}
	return out
}()

func compressedConfig() *config {
	return newConfig(Options{Compression: CompressionOptions{Enabled: true}}, true)
}

func deflateConn(sc *streamConn, server bool) *Conn {
	cfg := compressedConfig()
	c := newConn(sc, cfg, discardHandler{}, server, nil, "")
	useDeflate(c, deflate.Params{ServerMaxWindowBits: deflate.MaxWindowBits, ClientMaxWindowBits: deflate.MaxWindowBits})
	return c
}

// BenchmarkWriteCompressedJSON2KiB compresses and writes a 2 KiB JSON
// message from a server with context takeover.
func BenchmarkWriteCompressedJSON2KiB(b *testing.B) {
	sc := newStreamConn(nil, 0)
	c := deflateConn(sc, true)
	b.ReportAllocs()
	b.SetBytes(int64(len(jsonMessages[0])))
	i := 0
	for b.Loop() {
		if err := c.WriteMessage(OpText, jsonMessages[i%len(jsonMessages)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(sc.written)/float64(b.N), "wire-bytes/msg")
}

// BenchmarkReadCompressedJSON2KiB reads and inflates 2 KiB JSON messages
// compressed without context takeover (so that a fixed cycle of frames can
// be served in a loop).
func BenchmarkReadCompressedJSON2KiB(b *testing.B) {
	msg := jsonMessages[0]
	var z bytes.Buffer
	fw, _ := flate.NewWriter(&z, flate.BestSpeed)
	fw.Write(msg)
	fw.Flush()
	f := frame(0xC1, z.Bytes()[:z.Len()-4])
	sc := newStreamConn(f, b.N)
	cfg := compressedConfig()
	c := newConn(sc, cfg, discardHandler{}, true, nil, "")
	useDeflate(c, deflate.Params{ServerMaxWindowBits: deflate.MaxWindowBits, ClientMaxWindowBits: deflate.MaxWindowBits,
		ClientNoContextTakeover: true})
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	c.ReadLoop()
}
