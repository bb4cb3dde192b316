package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gustload -seq reads the leading digits of each message: the number must
// come first, end at a byte that is not a digit, and the message must keep
// its size whatever the number's length.
func TestMessageStartsWithItsNumber(t *testing.T) {
	for _, seq := range []uint64{1, 9, 10, 12345, 1 << 40} {
		m := message(seq, 1024)
		require.Len(t, m, 1024)
		num, rest, ok := strings.Cut(string(m), " ")
		require.True(t, ok)
		require.Equal(t, strconv.FormatUint(seq, 10), num)
		require.NotEmpty(t, rest)
		require.NotContains(t, "0123456789", rest[:1])
	}
}
