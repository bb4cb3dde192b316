package wsframe

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// For Put, as the root's Opcode constants are: notFinal clears FIN, rsv1
// sets RSV1.
const (
	rsv1     uint8 = 0x40
	notFinal uint8 = 0x80
)

func TestParse(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	cases := []struct {
		name    string
		op      uint8
		n       int
		masked  bool
		server  bool
		wantErr string
	}{
		{"small masked", opText, 5, true, true, ""},
		{"16-bit length", opBinary, 300, true, true, ""},
		{"64-bit length", opBinary, 70000, true, true, ""},
		{"server frame to a client", opText, 10, false, false, ""},
		{"client frame not masked", opText, 10, false, true, "client frame not masked"},
		{"server frame masked", opText, 10, true, false, "server frame masked"},
		{"fragmented control", opPing | notFinal, 0, true, true, "fragmented control frame"},
		{"long control", opPing, 126, true, true, "control frame payload over 125 bytes"},
		{"reserved opcode", 3, 1, true, true, "reserved opcode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, 14)
			hn := Put(b, tc.op, tc.n, tc.masked, key)
			b = b[:hn]
			var h Header[uint8]
			n, err := Parse(b, &h, tc.server, false)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				// The checks need the first two bytes only.
				_, err = Parse(b[:2], &h, tc.server, false)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, hn, n)
			require.Equal(t, int64(tc.n), h.Length)
			require.Equal(t, tc.op&0x0f, h.Op)
			require.True(t, h.Fin)
			if tc.masked {
				require.Equal(t, key, h.Key)
			}
			for cut := range hn { // every prefix asks for more
				n, err := Parse(b[:cut], &h, tc.server, false)
				require.NoError(t, err)
				require.Zero(t, n)
			}
		})
	}
}

func TestParseRSV(t *testing.T) {
	var h Header[uint8]
	b := []byte{0xC1, 0x85, 0, 0, 0, 0} // text, RSV1
	n, err := Parse(b, &h, true, true)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.True(t, h.Compressed)
	_, err = Parse(b, &h, true, false)
	require.ErrorContains(t, err, "reserved bits set", "RSV1 without permessage-deflate")
	b[0] = 0xA1 // RSV2
	_, err = Parse(b, &h, true, true)
	require.ErrorContains(t, err, "reserved bits set")
	b = []byte{0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	_, err = Parse(b, &h, true, false)
	require.ErrorContains(t, err, "most significant bit")
}

// FuzzParse: any bytes parse without a panic into a header no longer
// than they are, and what Put encodes parses back to itself.
func FuzzParse(f *testing.F) {
	f.Add([]byte{0x81, 0x85, 1, 2, 3, 4}, true, false)
	f.Add([]byte{0x82, 0x7e, 0x01, 0x00}, false, true)
	f.Add([]byte{0xC2, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 9, 9, 9, 9}, true, true)
	f.Fuzz(func(t *testing.T, b []byte, server, deflate bool) {
		var h Header[uint8]
		n, err := Parse(b, &h, server, deflate)
		if err != nil {
			require.Zero(t, n)
			return
		}
		require.LessOrEqual(t, n, len(b))
		if n == 0 {
			return
		}
		require.GreaterOrEqual(t, h.Length, int64(0))
		enc := make([]byte, 14)
		op := h.Op
		if !h.Fin {
			op |= notFinal
		}
		if h.Compressed {
			op |= rsv1
		}
		m := Put(enc, op, int(h.Length), server, h.Key)
		var back Header[uint8]
		k, err := Parse(enc[:m], &back, server, deflate)
		require.NoError(t, err)
		require.Equal(t, m, k)
		require.Equal(t, h, back)
	})
}
