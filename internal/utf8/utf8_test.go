package utf8

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// firstFailByteByByte feeds p one byte at a time and returns the index of
// the first byte after which Feed reports false, or -1.
func firstFailByteByByte(p []byte) int {
	var v Validator
	for i := range p {
		if !v.Feed(p[i : i+1]) {
			return i
		}
	}
	return -1
}

func TestValidatorTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		failAt   int  // index of the first byte that makes the text invalid; -1 if none
		complete bool // valid and on a boundary (only when failAt == -1)
	}{
		{"empty", "", -1, true},
		{"ascii", "Hello, world", -1, true},
		{"long ascii", strings.Repeat("abcdefg", 20), -1, true},
		{"two byte", "\u00e9t\u00e9", -1, true},
		{"three byte", "\u20ac\ud7ff\ue000\uffff", -1, true},
		{"four byte", "\U0001F600\U00010000\U0010FFFF", -1, true},
		{"kosme", "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5", -1, true},
		{"truncated 2", "a\xc3", -1, false},
		{"truncated 3", "a\xe2\x82", -1, false},
		{"truncated 4", "\xf0\x9f\x98", -1, false},
		{"lone E0", "\xe0", -1, false},
		{"lone F4", "\xf4", -1, false},

		{"stray continuation", "ab\x80cd", 2, false},
		{"stray continuation BF", "\xbf", 0, false},
		{"C0 at once", "\xc0\x80", 0, false},
		{"C1 at once", "x\xc1\xbf", 1, false},
		{"F5 at once", "\xf5\x80\x80\x80", 0, false},
		{"FF at once", "\xff", 0, false},
		{"FE at once", "ok\xfe", 2, false},
		{"surrogate D800", "\xed\xa0\x80", 1, false},
		{"surrogate DFFF", "\xed\xbf\xbf", 1, false},
		{"ED 9F ok", "\xed\x9f\xbf", -1, true},
		{"above max", "\xf4\x90\x80\x80", 1, false},
		{"F4 8F ok", "\xf4\x8f\xbf\xbf", -1, true},
		{"overlong 3", "\xe0\x80\xaf", 1, false},
		{"overlong 3 9F", "\xe0\x9f\xbf", 1, false},
		{"E0 A0 ok", "\xe0\xa0\x80", -1, true},
		{"overlong 4", "\xf0\x80\x80\xaf", 1, false},
		{"overlong 4 8F", "\xf0\x8f\xbf\xbf", 1, false},
		{"F0 90 ok", "\xf0\x90\x80\x80", -1, true},
		{"lead then ascii", "\xc3a", 1, false},
		{"3 lead then ascii late", "\xe2\x82a", 2, false},
		{"4 lead then lead", "\xf0\x9f\xf0", 2, false},
		{"too many continuations", "\xc3\xa9\xa9", 2, false},
		// Autobahn 6.4.1: the payload fails at the F4 90 of U+110000, in the
		// middle of a message whose first part is valid.
		{"autobahn 6.4.1", "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xf4\x90\x80\x80\x65\x64\x69\x74\x65\x64", 12, false},
		{"invalid after long ascii", strings.Repeat("a", 37) + "\x80", 37, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			require.Equal(t, tt.failAt, firstFailByteByByte(in), "byte by byte")

			// Fed whole, Feed agrees and Complete says whether it is valid.
			var v Validator
			require.Equal(t, tt.failAt == -1, v.Feed(in))
			require.Equal(t, tt.complete, v.Complete())
			require.Equal(t, tt.complete, Valid(in))
			require.Equal(t, utf8.Valid(in), tt.complete, "table entry disagrees with unicode/utf8")

			// The prefix up to the failing byte is still accepted, and one
			// more byte fails it.
			if tt.failAt >= 0 {
				v.Reset()
				require.True(t, v.Feed(in[:tt.failAt]))
				require.False(t, v.Feed(in[tt.failAt:tt.failAt+1]))
			}
		})
	}
}

func TestValidatorSticky(t *testing.T) {
	t.Parallel()
	var v Validator
	require.False(t, v.Feed([]byte{0xff}))
	require.False(t, v.Feed([]byte("fine")))
	require.False(t, v.Feed(nil))
	require.False(t, v.Complete())
	v.Reset()
	require.True(t, v.Complete())
	require.True(t, v.Feed([]byte("fine")))
	require.True(t, v.Complete())
}

func TestValidatorEmptyFeeds(t *testing.T) {
	t.Parallel()
	var v Validator
	require.True(t, v.Feed([]byte{0xe2}))
	require.True(t, v.Feed(nil))
	require.True(t, v.Feed([]byte{}))
	require.False(t, v.Complete())
	require.True(t, v.Feed([]byte{0x82, 0xac}))
	require.True(t, v.Complete())
}

// interestingBytes are the edges of every byte range the rules tell apart.
var interestingBytes = []byte{
	0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2,
	0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff,
}

// randText returns text that is often valid, often almost valid.
func randText(r *rand.Rand, max int) []byte {
	n := r.IntN(max + 1)
	var b []byte
	for len(b) < n {
		switch r.IntN(5) {
		case 0:
			b = append(b, interestingBytes[r.IntN(len(interestingBytes))])
		case 1:
			b = append(b, byte(r.Uint32()))
		case 2:
			b = append(b, "plain ascii"[:r.IntN(12)]...)
		default:
			// A valid code point, of any length, sometimes cut short.
			var rn rune
			switch r.IntN(4) {
			case 0:
				rn = rune(r.IntN(0x800))
			case 1:
				rn = rune(r.IntN(0x10000))
			default:
				rn = rune(0x10000 + r.IntN(0x100000))
			}
			enc := utf8.AppendRune(nil, rn)
			if r.IntN(6) == 0 {
				enc = enc[:r.IntN(len(enc))]
			}
			b = append(b, enc...)
		}
	}
	return b
}

// TestValidatorSplitsMatchStdlib: for random text split at random points,
// Feed on every piece and then Complete gives utf8.Valid of the whole.
func TestValidatorSplitsMatchStdlib(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 20000; iter++ {
		p := randText(r, 80)
		var v Validator
		ok := true
		for rest := p; len(rest) > 0; {
			k := r.IntN(len(rest) + 1)
			ok = v.Feed(rest[:k]) && ok
			rest = rest[k:]
		}
		want := utf8.Valid(p)
		require.Equal(t, want, ok && v.Complete(), "%x", p)
		require.Equal(t, want, Valid(p), "%x", p)
		if !ok {
			require.False(t, want, "Feed failed on valid text %x", p)
		}
	}
}

// properPrefixes holds every proper, non-empty prefix of the UTF-8
// encoding of every valid code point: the only things that may follow the
// last complete code point of a text that is still a valid prefix. It is
// built from unicode/utf8 alone, independently of the automaton.
var properPrefixes = sync.OnceValue(func() map[string]bool {
	m := make(map[string]bool)
	var buf [utf8.UTFMax]byte
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		n := utf8.EncodeRune(buf[:], r)
		for k := 1; k < n; k++ {
			m[string(buf[:k])] = true
		}
	}
	return m
})

// validPrefix reports whether some valid UTF-8 text starts with p: p is
// valid text followed by a proper prefix of one code point's encoding.
func validPrefix(p []byte) bool {
	pre := properPrefixes()
	for k := 0; k < utf8.UTFMax && k <= len(p); k++ {
		head, tail := p[:len(p)-k], p[len(p)-k:]
		if (k == 0 || pre[string(tail)]) && utf8.Valid(head) {
			return true
		}
	}
	return false
}

// oracleFirstFail returns the first i such that no valid text has p[:i+1]
// as a prefix, or -1.
func oracleFirstFail(p []byte) int {
	for i := range p {
		if !validPrefix(p[:i+1]) {
			return i
		}
	}
	return -1
}

func TestValidatorFailsFast(t *testing.T) {
	t.Parallel()
	// Every input of up to three interesting bytes, then random ones.
	var inputs [][]byte
	for _, a := range interestingBytes {
		inputs = append(inputs, []byte{a})
		for _, b := range interestingBytes {
			inputs = append(inputs, []byte{a, b})
			for _, c := range interestingBytes {
				inputs = append(inputs, []byte{a, b, c, 0x80}, []byte{a, b, c, 'x'})
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		inputs = append(inputs, randText(r, 40))
	}
	for _, p := range inputs {
		want := oracleFirstFail(p)
		require.Equal(t, want, firstFailByteByByte(p), "byte by byte %x", p)
		// Fed in two pieces, the verdict after each piece agrees too.
		cut := len(p) / 2
		var v Validator
		require.Equal(t, want == -1 || want >= cut, v.Feed(p[:cut]), "first half of %x", p)
		require.Equal(t, want == -1, v.Feed(p[cut:]), "second half of %x", p)
	}
}

func TestValidatorNoAllocs(t *testing.T) {
	p := []byte(strings.Repeat("h\u00e9llo w\u00f6rld \u20ac\U0001F600 ", 20))
	var v Validator
	allocs := testing.AllocsPerRun(100, func() {
		v.Reset()
		v.Feed(p)
	})
	require.Zero(t, allocs)
}

// TestValidatorASCIIRuns: long ASCII runs (the 64-byte blocks of
// asciiRun) with one byte that is not ASCII, valid or not, at each place,
// agree with unicode/utf8, fed whole and in two pieces.
func TestValidatorASCIIRuns(t *testing.T) {
	t.Parallel()
	for _, odd := range [][]byte{{0xff}, {0x80}, {0xc3, 0xa9}, {0xe2, 0x82, 0xac}, {0xe2, 0x82}} {
		for n := 60; n <= 300; n += 7 {
			for at := 0; at <= n; at++ {
				p := append(append(bytes.Repeat([]byte("a"), at), odd...), bytes.Repeat([]byte("b"), n-at)...)
				want := utf8.Valid(p)
				require.Equal(t, want, Valid(p), "% x at %d of %d", odd, at, n)
				var v Validator
				cut := (at * 7) % (len(p) + 1)
				got := v.Feed(p[:cut]) && v.Feed(p[cut:]) && v.Complete()
				require.Equal(t, want, got, "% x at %d of %d, cut at %d", odd, at, n, cut)
			}
		}
	}
}

func benchInputs() []struct {
	name string
	p    []byte
} {
	ascii := bytes.Repeat([]byte("The quick brown fox jumps over the lazy dog. "), 30)[:1024]
	mixed := []byte(strings.Repeat("Grüße, κόσμε, 世界, 😀! ", 60))
	for !utf8.Valid(mixed[:1024]) {
		mixed = mixed[1:]
	}
	// JSON-like text: ASCII but for a word of Latin now and then.
	var json []byte
	for i := 0; len(json) < 1<<20; i++ {
		json = fmt.Appendf(json, `{"id":%d,"user":"user-%d","note":"lorem ipsum dolor sit amet, consectetur adipiscing elit","city":"%s"},`,
			i, i%97, []string{"Zürich", "Paris", "Kraków", "London"}[i%4])
	}
	for !utf8.Valid(json[:1<<20]) {
		json = json[1:]
	}
	return []struct {
		name string
		p    []byte
	}{
		{"ascii1K", ascii},
		{"mixed1K", mixed[:1024]},
		{"ascii64K", bytes.Repeat(ascii, 64)},
		{"ascii1M", bytes.Repeat(ascii, 1024)},
		{"json1K", json[:1024]},
		{"json64K", json[:64<<10]},
		{"json1M", json[:1<<20]},
	}
}

func BenchmarkValidator(b *testing.B) {
	for _, in := range benchInputs() {
		b.Run(fmt.Sprintf("Feed/%s", in.name), func(b *testing.B) {
			b.SetBytes(int64(len(in.p)))
			b.ReportAllocs()
			var v Validator
			for b.Loop() {
				v.Reset()
				if !v.Feed(in.p) || !v.Complete() {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(fmt.Sprintf("Valid/%s", in.name), func(b *testing.B) {
			b.SetBytes(int64(len(in.p)))
			b.ReportAllocs()
			for b.Loop() {
				if !Valid(in.p) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(fmt.Sprintf("unicode-utf8.Valid/%s", in.name), func(b *testing.B) {
			b.SetBytes(int64(len(in.p)))
			b.ReportAllocs()
			for b.Loop() {
				if !utf8.Valid(in.p) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

func FuzzValidator(f *testing.F) {
	f.Add([]byte("hello"), uint16(2))
	f.Add([]byte("\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xf4\x90\x80\x80"), uint16(12))
	f.Fuzz(func(t *testing.T, p []byte, cut uint16) {
		c := min(int(cut), len(p))
		var v Validator
		first := v.Feed(p[:c])
		second := v.Feed(p[c:])
		want := utf8.Valid(p)
		if got := second && v.Complete(); got != want {
			t.Fatalf("Feed(%x | %x): valid %v, unicode/utf8 says %v", p[:c], p[c:], got, want)
		}
		if first && !second && validPrefix(p) {
			t.Fatalf("Feed(%x | %x) failed on a valid prefix", p[:c], p[c:])
		}
		if !first && validPrefix(p[:c]) {
			t.Fatalf("Feed(%x) failed on a valid prefix", p[:c])
		}
		if Valid(p) != want {
			t.Fatalf("Valid(%x) != unicode/utf8.Valid", p)
		}
	})
}
