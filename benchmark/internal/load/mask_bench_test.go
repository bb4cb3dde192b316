package load

import "testing"

func BenchmarkMaskBytes(b *testing.B) {
	buf := make([]byte, 256<<10)
	key := [4]byte{1, 2, 3, 4}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		maskBytes(key, 1, buf)
	}
}

func BenchmarkMismatch(b *testing.B) {
	m := &message{data: make([]byte, 256<<10), seqLen: 8}
	chunk := make([]byte, 256<<10-100)
	var seq [16]byte
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		m.mismatch(seq[:], 100, chunk)
	}
}
