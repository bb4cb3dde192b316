package mask

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// naive is the reference implementation: the RFC 6455 definition, one byte
// at a time.
func naive(dst, src []byte, key [4]byte, pos int) int {
	for i := range src {
		dst[i] = src[i] ^ key[(pos+i)%4]
	}
	return (pos + len(src)) % 4
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestApplyMatchesNaive(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for n := 0; n <= 300; n++ { // past several of the 64-byte blocks, with every tail
		for pos := 0; pos < 4; pos++ {
			src := randBytes(r, n)
			want := make([]byte, n)
			wantNext := naive(want, src, key, pos)

			got := bytes.Clone(src)
			require.Equal(t, wantNext, Apply(got, key, pos), "n=%d pos=%d", n, pos)
			require.Equal(t, want, got, "Apply n=%d pos=%d", n, pos)

			dst := make([]byte, n+3) // longer dst must be left alone past n
			require.Equal(t, wantNext, ApplyCopy(dst, src, key, pos), "n=%d pos=%d", n, pos)
			require.Equal(t, want, dst[:n], "ApplyCopy n=%d pos=%d", n, pos)
			require.Equal(t, []byte{0, 0, 0}, dst[n:], "ApplyCopy wrote past len(src)")
		}
	}
}

func TestApplyTable(t *testing.T) {
	t.Parallel()
	// The RFC 6455 section 5.7 example: "Hello" masked with 37 fa 21 3d.
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	tests := []struct {
		name string
		in   []byte
		pos  int
		want []byte
		next int
	}{
		{"empty", nil, 0, nil, 0},
		{"empty keeps pos", []byte{}, 3, []byte{}, 3},
		{"rfc hello", []byte("Hello"), 0, []byte{0x7f, 0x9f, 0x4d, 0x51, 0x58}, 1},
		{"pos reduced mod 4", []byte("Hello"), 4, []byte{0x7f, 0x9f, 0x4d, 0x51, 0x58}, 1},
		{"pos 2", []byte{0, 0, 0}, 2, []byte{0x21, 0x3d, 0x37}, 1},
		{"large pos", []byte{0}, 1<<40 + 1, []byte{0xfa}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(tt.in)
			require.Equal(t, tt.next, Apply(b, key, tt.pos))
			require.Equal(t, tt.want, b)
			if len(tt.in) > 0 {
				require.Equal(t, tt.in, func() []byte { Apply(b, key, tt.pos); return b }(), "masking twice is the identity")
			}
		})
	}
}

func TestApplyChained(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 2000; iter++ {
		n := r.IntN(200)
		key := [4]byte(randBytes(r, 4))
		src := randBytes(r, n)
		want := make([]byte, n)
		naive(want, src, key, 0)

		// Split into a random number of random pieces.
		got := bytes.Clone(src)
		dst := make([]byte, n)
		pos, posCopy := 0, 0
		for off := 0; off < n; {
			m := r.IntN(n-off+1) + (1 - min(1, r.IntN(4))) // sometimes empty pieces
			m = min(m, n-off)
			pos = Apply(got[off:off+m], key, pos)
			posCopy = ApplyCopy(dst[off:], src[off:off+m], key, posCopy)
			off += m
		}
		require.Equal(t, want, got, "iter %d", iter)
		require.Equal(t, want, dst, "iter %d", iter)
		require.Equal(t, n&3, pos)
		require.Equal(t, n&3, posCopy)
	}
}

func TestApplyCopyShortDstPanics(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { ApplyCopy(make([]byte, 3), make([]byte, 4), [4]byte{}, 0) })
}

func TestApplyNoAllocs(t *testing.T) {
	b := make([]byte, 1000)
	allocs := testing.AllocsPerRun(100, func() { Apply(b, [4]byte{1, 2, 3, 4}, 1) })
	require.Zero(t, allocs)
}

var benchSizes = []int{16, 300, 1024, 64 << 10, 1 << 20}

func BenchmarkApply(b *testing.B) {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for _, n := range benchSizes {
		buf := make([]byte, n)
		b.Run(fmt.Sprintf("fast/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				Apply(buf, key, 1)
			}
		})
		b.Run(fmt.Sprintf("naive/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				naive(buf, buf, key, 1)
			}
		})
	}
}

func BenchmarkApplyCopy(b *testing.B) {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for _, n := range benchSizes {
		src := make([]byte, n)
		dst := make([]byte, n)
		b.Run(fmt.Sprintf("fast/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				ApplyCopy(dst, src, key, 1)
			}
		})
		b.Run(fmt.Sprintf("naive/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				naive(dst, src, key, 1)
			}
		})
	}
}

func FuzzApply(f *testing.F) {
	f.Add([]byte("Hello"), uint32(0x3d21fa37), uint8(0), uint16(2))
	f.Add(make([]byte, 77), uint32(0xdeadbeef), uint8(3), uint16(40))
	f.Fuzz(func(t *testing.T, data []byte, k uint32, pos uint8, split uint16) {
		key := [4]byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
		p := int(pos)
		want := make([]byte, len(data))
		wantNext := naive(want, data, key, p%4)

		s := int(split)
		if s > len(data) {
			s = len(data)
		}
		got := bytes.Clone(data)
		next := Apply(got[s:], key, Apply(got[:s], key, p))
		if next != wantNext || !bytes.Equal(got, want) {
			t.Fatalf("Apply split %d: got %x next %d, want %x next %d", s, got, next, want, wantNext)
		}
		dst := make([]byte, len(data))
		next = ApplyCopy(dst[s:], data[s:], key, ApplyCopy(dst, data[:s], key, p))
		if next != wantNext || !bytes.Equal(dst, want) {
			t.Fatalf("ApplyCopy split %d: got %x next %d, want %x next %d", s, dst, next, want, wantNext)
		}
	})
}
