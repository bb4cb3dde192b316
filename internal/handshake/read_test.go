package handshake

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/stretchr/testify/require"
)

// A head read in one piece or byte by byte parses the same, and the bytes
// read with it after its end stay in the buffer; byte by byte, reading stops
// at the end.
func TestReadHead(t *testing.T) {
	in := browserRequest + "frames"
	for name, tc := range map[string]struct {
		r     func() io.Reader
		after string
	}{
		"whole":        {func() io.Reader { return strings.NewReader(in) }, "frames"},
		"byte by byte": {func() io.Reader { return iotest.OneByteReader(strings.NewReader(in)) }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			head, err := ReadHead(tc.r(), 16<<10)
			require.NoError(t, err)
			defer bufpool.Put(head.Buf)
			require.Equal(t, "GET", head.Method)
			require.Equal(t, "/chat?room=42", head.RequestURI)
			require.Equal(t, len(browserRequest), head.N)
			read := (*head.Buf)[:head.Read]
			require.Equal(t, in[:head.Read], string(read))
			require.Equal(t, tc.after, string(read[head.N:]))
		})
	}
}

// The buffer starts at bufpool.MinSize and doubles as the head arrives, up
// to maxBytes: a head of maxBytes passes, one byte more is refused with 431,
// in one piece or in many.
func TestReadHeadBound(t *testing.T) {
	const maxBytes = 3000 // not a power of two: the last step is shorter
	head := func(n int) string {
		const start, end = "GET / HTTP/1.1\r\nX: ", "\r\n\r\n"
		return start + strings.Repeat("a", n-len(start)-len(end)) + end
	}
	for _, pieces := range []bool{false, true} {
		r := func(s string) io.Reader {
			if pieces {
				return iotest.HalfReader(strings.NewReader(s))
			}
			return strings.NewReader(s)
		}
		h, err := ReadHead(r(head(100)), maxBytes)
		require.NoError(t, err)
		require.Equal(t, bufpool.MinSize, cap(*h.Buf), "a small head pins the smallest buffer")
		bufpool.Put(h.Buf)

		h, err = ReadHead(r(head(maxBytes)), maxBytes)
		require.NoError(t, err)
		require.Equal(t, maxBytes, h.N)
		bufpool.Put(h.Buf)

		h, err = ReadHead(r(head(maxBytes+1)), maxBytes)
		var he *Error
		require.ErrorAs(t, err, &he)
		require.Equal(t, Error{http.StatusRequestHeaderFieldsTooLarge, "request head too large"}, *he)
		require.Nil(t, h.Buf)
	}
}

// A malformed line is refused as soon as it is read, without waiting for
// the rest of the head.
func TestReadHeadMalformed(t *testing.T) {
	r := io.MultiReader(strings.NewReader("GET / HTTP/1.1\r\nBad Name: x\r\n"), iotest.ErrReader(errors.New("must not be read")))
	h, err := ReadHead(r, 16<<10)
	var he *Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, http.StatusBadRequest, he.Status)
	require.Nil(t, h.Buf)
}

// A read error comes back as it is, with how much was read before it.
func TestReadHeadReadError(t *testing.T) {
	h, err := ReadHead(strings.NewReader(""), 16<<10)
	require.ErrorIs(t, err, io.EOF)
	require.Zero(t, h.Read, "nothing came: not a handshake")
	require.Nil(t, h.Buf)

	h, err = ReadHead(strings.NewReader("GET / HTTP/1.1\r\n"), 16<<10)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, len("GET / HTTP/1.1\r\n"), h.Read)
	require.Nil(t, h.Buf)
}
