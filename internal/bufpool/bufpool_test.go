package bufpool

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGetSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, wantCap int
	}{
		{0, 512},
		{1, 512},
		{511, 512},
		{512, 512},
		{513, 1024},
		{1000, 1024},
		{1024, 1024},
		{1025, 2048},
		{65536, 65536},
		{65537, 131072},
		{MaxSize - 1, MaxSize},
		{MaxSize, MaxSize},
		{MaxSize + 1, MaxSize + 1},
		{3 * MaxSize, 3 * MaxSize},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			// Twice: the second Get may come from the pool.
			for range 2 {
				b := Get(tt.n)
				require.Len(t, *b, tt.n)
				require.Equal(t, tt.wantCap, cap(*b))
				Put(b)
			}
		})
	}
}

func TestGetNegativePanics(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { Get(-1) })
	require.Panics(t, func() { Grow(Get(1), -1) })
}

func TestPut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    *[]byte
	}{
		{"nil", nil},
		{"empty", new([]byte)},
		{"small", func() *[]byte { b := make([]byte, 10); return &b }()},
		{"not a power of two", func() *[]byte { b := make([]byte, 10, 1000); return &b }()},
		{"class size not from Get", func() *[]byte { b := make([]byte, 3, 4096); return &b }()},
		{"oversized", func() *[]byte { b := make([]byte, 2*MaxSize); return &b }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NotPanics(t, func() { Put(tt.b) })
		})
	}
	// Whatever was put, Get still honours its contract.
	for _, n := range []int{3, 1000, 4096} {
		b := Get(n)
		require.Len(t, *b, n)
		require.Equal(t, MinSize<<class(n), cap(*b))
		require.GreaterOrEqual(t, cap(*b), n)
		require.Zero(t, cap(*b)&(cap(*b)-1), "cap %d is not a power of two", cap(*b))
	}
}

func TestGrow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		start, grow int
		wantCap     int
	}{
		{"within cap", 10, 500, 512},
		{"shrink", 300, 20, 512},
		{"same", 512, 512, 512},
		{"next class", 500, 513, 1024},
		{"several classes", 100, 100000, 131072},
		{"beyond max", 1000, MaxSize + 5, MaxSize + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Get(tt.start)
			for i := range *b {
				(*b)[i] = byte(i)
			}
			g := Grow(b, tt.grow)
			require.Len(t, *g, tt.grow)
			require.Equal(t, tt.wantCap, cap(*g))
			for i := range min(tt.start, tt.grow) {
				require.Equal(t, byte(i), (*g)[i], "byte %d lost", i)
			}
			Put(g)
		})
	}
	g := Grow(nil, 700)
	require.Len(t, *g, 700)
	require.Equal(t, 1024, cap(*g))
	Put(g)
}

func TestGetPutNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, n := range []int{100, 4096, 1 << 20} {
		Put(Get(n)) // warm the pool
		allocs := testing.AllocsPerRun(1000, func() {
			b := Get(n)
			(*b)[0] = 1
			Put(b)
		})
		require.Zero(t, allocs, "Get(%d)+Put", n)
	}
}

func TestTryGet(t *testing.T) {
	require.Nil(t, TryGet(-1))
	require.Nil(t, TryGet(MaxSize+1))
	// TryGet never allocates, whether or not the pool has a buffer.
	allocs := testing.AllocsPerRun(100, func() {
		if b := TryGet(3 << 20); b != nil {
			Put(b)
		}
	})
	require.Zero(t, allocs)
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, n := range []int{700, 1 << 20, 3<<20 + 1} {
		b := Get(n)
		(*b)[0] = 42
		Put(b)
		got := TryGet(n)
		require.NotNil(t, got, "TryGet(%d) after a Put of its class", n)
		require.Len(t, *got, n)
		require.Equal(t, MinSize<<class(n), cap(*got))
		Put(got)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				n := (g*977 + i*131) % 70000
				b := Get(n)
				for j := range *b {
					(*b)[j] = byte(g)
				}
				b = Grow(b, n+1000)
				for j := range n {
					if (*b)[j] != byte(g) {
						panic("buffer shared between goroutines")
					}
				}
				Put(b)
			}
		}()
	}
	for range 8 {
		<-done
	}
}

func BenchmarkGetPut(b *testing.B) {
	for _, n := range []int{512, 4096, 65536, 1 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Put(Get(n))
			}
		})
	}
}

func BenchmarkGetPutParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			Put(Get(4096))
		}
	})
}

func BenchmarkGrow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		p := Get(100)
		p = Grow(p, 3000)
		p = Grow(p, 70000)
		Put(p)
	}
}

func BenchmarkMake(b *testing.B) {
	// For comparison with BenchmarkGetPut/4096.
	b.ReportAllocs()
	for b.Loop() {
		p := make([]byte, 4096)
		sink = p
	}
}

var sink []byte

// FuzzGrow drives a buffer through a series of sizes decoded from the
// input and checks the contracts of Get, Grow and Put along the way.
func FuzzGrow(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0, 0, 16, 1, 0})
	f.Add([]byte{0xff, 0xff, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b *[]byte
		fill := byte(0)
		for len(data) >= 2 {
			// Sizes up to 2 MiB, in 64-byte steps.
			n := (int(data[0]) | int(data[1])<<8) << 5
			data = data[2:]
			old := 0
			if b != nil {
				old = len(*b)
			}
			b = Grow(b, n)
			if len(*b) != n || cap(*b) < n || cap(*b) < MinSize || cap(*b)&(cap(*b)-1) != 0 {
				t.Fatalf("Grow to %d: len %d cap %d", n, len(*b), cap(*b))
			}
			for i := range min(old, n) {
				if (*b)[i] != fill {
					t.Fatalf("Grow to %d from %d lost byte %d", n, old, i)
				}
			}
			fill++
			for i := range *b {
				(*b)[i] = fill
			}
		}
		Put(b)
	})
}

func TestAppend(t *testing.T) {
	var b *[]byte
	var want []byte
	for i := range 200 {
		p := bytes.Repeat([]byte{byte(i)}, i)
		b = Append(b, p)
		want = append(want, p...)
	}
	if !bytes.Equal(*b, want) {
		t.Fatalf("Append kept %d bytes, want %d", len(*b), len(want))
	}
	Put(b)
}
