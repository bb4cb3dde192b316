package netpoll

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// records follows the record framing through any cut of the stream: it is
// inside a record from the first byte of a header to the last of the body,
// an empty record included, and at a boundary only between records.
func TestRecords(t *testing.T) {
	rec := func(n int) []byte {
		b := []byte{23, 3, 3, byte(n >> 8), byte(n)}
		return append(b, make([]byte, n)...)
	}
	var stream []byte
	var bounds []int // the offsets in stream between records
	for _, n := range []int{0, 1, 300, 16<<10 + 256, 0, 5, 65535} {
		stream = append(stream, rec(n)...)
		bounds = append(bounds, len(stream))
	}
	atBound := func(i int) bool {
		if i == 0 {
			return true
		}
		for _, b := range bounds {
			if b == i {
				return true
			}
		}
		return false
	}
	for _, step := range []int{1, 2, 3, 5, 7, 512, 16 << 10, len(stream)} {
		var r records
		require.False(t, r.begun())
		for i := 0; i < len(stream); {
			j := min(i+step, len(stream))
			r.add(stream[i:j])
			i = j
			require.Equal(t, !atBound(i), r.begun(), "step %d, after %d bytes", step, i)
		}
	}
	// Every cut inside a header and a body, one byte at a time.
	var r records
	r.add(nil)
	require.False(t, r.begun())
	for i, b := range rec(3) {
		r.add([]byte{b})
		require.Equal(t, i < 7, r.begun(), "after byte %d", i)
	}
}
