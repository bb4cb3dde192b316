//go:build !amd64 || purego

package utf8

import "unsafe"

// asciiRun is ascii_amd64.s's loop in Go, for the other architectures and
// for the purego build tag (which the tests run too, to hold the two to
// the same results).
func asciiRun(p *byte, n int) int {
	b := unsafe.Slice(p, n)
	i := 0
	for ; n-i >= 64; i += 64 {
		q := b[i : i+64 : i+64]
		if (word(q)|word(q[8:])|word(q[16:])|word(q[24:])|word(q[32:])|word(q[40:])|word(q[48:])|word(q[56:]))&hiBits != 0 {
			break
		}
	}
	return i
}
