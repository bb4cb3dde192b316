//go:build !amd64 || purego

package mask

import (
	"encoding/binary"
	"unsafe"
)

// xorKey64 is xor_amd64.s's loop in Go, for the other architectures and
// for the purego build tag (which the tests run too, to hold the two to
// the same results).
func xorKey64(dst, src *byte, n int, key uint64) {
	d := unsafe.Slice(dst, n)
	s := unsafe.Slice(src, n)
	for i := 0; i < n; i += 32 {
		s := s[i : i+32 : i+32]
		d := d[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(d[0:8], binary.LittleEndian.Uint64(s[0:8])^key)
		binary.LittleEndian.PutUint64(d[8:16], binary.LittleEndian.Uint64(s[8:16])^key)
		binary.LittleEndian.PutUint64(d[16:24], binary.LittleEndian.Uint64(s[16:24])^key)
		binary.LittleEndian.PutUint64(d[24:32], binary.LittleEndian.Uint64(s[24:32])^key)
	}
}
