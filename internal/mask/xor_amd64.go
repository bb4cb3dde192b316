//go:build !purego

package mask

// xorKey64 sets dst[i] = src[i] ^ byte(key>>(8*(i%8))) for i < n, where n
// is a positive multiple of 64 and dst and src hold n bytes, which may be
// the same bytes (xor_amd64.s).
//
//go:noescape
func xorKey64(dst, src *byte, n int, key uint64)
