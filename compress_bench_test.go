package gust

import (
	"bytes"
	"compress/flate"
	"fmt"
	"testing"

	"github.com/gustws/gust/internal/deflate"
)

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
