//go:build !purego

package utf8

// asciiRun returns the length of the longest prefix of p[:n] made of whole
// 64-byte blocks of ASCII bytes (ascii_amd64.s).
//
//go:noescape
func asciiRun(p *byte, n int) int
