package deflate

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/flate"
)

// feed returns n JSON messages like a live feed's: arrays of 1 to 11 events
// whose keys repeat and whose values vary, about 1 KiB each.
func feed(n int) [][]byte {
	names := []string{"Amara Okafor", "Lukas Brandt", "Sofia Marino", "Kenji Watanabe", "Ana Souza", "Noah Smith"}
	kinds := []string{"order.created", "order.paid", "order.shipped", "cart.updated"}
	rng := rand.New(rand.NewPCG(5, 6))
	var out [][]byte
	for range n {
		b := []byte{'['}
		for j := range 1 + rng.IntN(11) {
			if j > 0 {
				b = append(b, ',')
			}
			name := names[rng.IntN(len(names))]
			b = fmt.Appendf(b, `{"id":%d,"name":%q,"event":%q,"ts":"2026-11-%02dT%02d:%02d:%02d.%03dZ","amount":%d.%02d,"currency":"EUR","ok":%t}`,
				rng.IntN(100000), name, kinds[rng.IntN(len(kinds))], 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60),
				rng.IntN(1000), rng.IntN(500), rng.IntN(100), rng.IntN(2) == 0)
		}
		out = append(out, append(b, ']'))
	}
	return out
}

// BenchmarkPrime compresses a stream of related messages (feed) at level
// 1 as a connection does with context takeover: with a compressor held
// across messages, with a pooled one primed with the last N bytes sent
// (ResetDict), and from an empty window. It reports the bytes on the wire
// per message: what primeSize trades against the priming's CPU.
func BenchmarkPrime(b *testing.B) {
	const msgs = 256
	stream := feed(msgs)
	for _, prime := range []int{-1, 0, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 32 << 10} {
		name := fmt.Sprintf("primed-%d", prime)
		switch prime {
		case -1:
			name = "held"
		case 0:
			name = "empty"
		}
		b.Run(name, func(b *testing.B) {
			var s sink
			fw, _ := flate.NewWriter(&s, flate.BestSpeed)
			var sent []byte
			wire, n := 0, 0
			for b.Loop() {
				msg := stream[n%msgs]
				n++
				s.n = 0
				if prime >= 0 {
					fw.ResetDict(&s, sent[max(0, len(sent)-prime):])
				}
				fw.Write(msg)
				fw.Flush()
				wire += s.n - 4
				sent = append(sent, msg...)
				if len(sent) > 64<<10 {
					sent = append(sent[:0], sent[len(sent)-32<<10:]...)
				}
			}
			b.ReportMetric(float64(wire)/float64(n), "wire-B/msg")
		})
	}
}
