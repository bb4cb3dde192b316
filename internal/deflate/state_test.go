package deflate

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/leakcheck"
	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/internal/deflate"))
}

// locked is a server's state with the defaults and a write lock of its own.
func locked(t *testing.T, p Params) (*State, *sync.Mutex) {
	mu := new(sync.Mutex)
	c := Config{Enabled: true}.WithDefaults()
	p.ServerMaxWindowBits, p.ClientMaxWindowBits = MaxWindowBits, MaxWindowBits
	d := NewState(p, &c, true, mu)
	t.Cleanup(func() {
		mu.Lock()
		d.Release()
		mu.Unlock()
	})
	return d, mu
}

// compress is Compress under the lock, as bytes.
func compress(t *testing.T, d *State, mu *sync.Mutex, p []byte) []byte {
	mu.Lock()
	buf, n, err := d.Compress(p, false)
	mu.Unlock()
	require.NoError(t, err)
	defer bufpool.Put(buf)
	return bytes.Clone((*buf)[:n])
}

// randomLetters compresses poorly on its own, to nothing against itself.
func randomLetters(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return b
}

// TestIdleReleaseKeepsContext checks that a state that gave its compressor
// back goes on compressing from an empty window, which the peer's inflater
// (which kept its window) decodes as well.
func TestIdleReleaseKeepsContext(t *testing.T) {
	t.Parallel()
	d, mu := locked(t, Params{})
	msg := randomLetters(1000)
	dc := testkit.NewDeflatePeer()
	var sizes []int
	for i := range 3 {
		z := compress(t, d, mu, msg)
		require.Equal(t, msg, dc.Decompress(t, z))
		sizes = append(sizes, len(z))
		if i == 0 {
			d.releaseIdle() // clears "used recently"
			d.releaseIdle() // gives the compressor back
			mu.Lock()
			require.Nil(t, d.fw)
			mu.Unlock()
		}
	}
	require.Equal(t, sizes[0], sizes[1], "after the release, the second message starts from an empty window")
	require.Less(t, sizes[2], sizes[1]/10, "the third refers back to the second")
}

func TestNoContextTakeoverHoldsNoCompressor(t *testing.T) {
	t.Parallel()
	d, mu := locked(t, Params{ServerNoContextTakeover: true})
	msg := randomLetters(1000)
	dc := testkit.NewDeflatePeer()
	for range 2 {
		z := compress(t, d, mu, msg)
		require.Equal(t, msg, dc.Decompress(t, z))
		require.Greater(t, len(z), len(msg)/2)
		require.Nil(t, d.fw)
	}
}

// TestStream compresses a message in fragments, each flushed on its own,
// then a whole message that refers back to it: the compressor went back to
// the state with context takeover.
func TestStream(t *testing.T) {
	t.Parallel()
	d, mu := locked(t, Params{})
	msg := randomLetters(3000)
	const headroom = 14
	s := d.StartStream(headroom, headroom+1024)
	var wire []byte
	for i := 0; i < len(msg); i += 1000 {
		require.NoError(t, s.Write(msg[i:i+1000]))
		require.NoError(t, s.Flush())
		buf, n := s.Fragment(i+1000 == len(msg))
		require.GreaterOrEqual(t, len(*buf), headroom+n)
		wire = append(wire, (*buf)[headroom:headroom+n]...)
		s.Sent()
	}
	mu.Lock()
	s.End(true)
	held := d.fw != nil
	mu.Unlock()
	dc := testkit.NewDeflatePeer()
	require.Equal(t, msg, dc.Decompress(t, wire))
	z := compress(t, d, mu, msg)
	require.Equal(t, msg, dc.Decompress(t, z))
	if holdLimit == 0 { // -tags gust_deflate_prime: nothing is held, and a stream's bytes are not kept
		require.False(t, held)
		require.Greater(t, len(z), len(msg), "the message after the stream starts from an empty window")
		return
	}
	require.True(t, held, "the connection holds its compressor again")
	require.Less(t, len(z), len(msg)/10, "the message after the stream refers back to it")

	// A stream that ended badly gives its compressor up.
	s = d.StartStream(headroom, headroom+1024)
	require.NoError(t, s.Write(msg))
	mu.Lock()
	s.End(false)
	require.Nil(t, d.fw)
	mu.Unlock()
}

// TestCompressAlone checks that a message compressed alone starts from an
// empty window, whatever the state's context, and is the same for every
// state of the same Setting; DropContext then keeps the next message off
// the compressor's window.
func TestCompressAlone(t *testing.T) {
	t.Parallel()
	d, mu := locked(t, Params{})
	other, _ := locked(t, Params{})
	msg := []byte(strings.Repeat("prepared once, sent to many ", 40))
	dc := testkit.NewDeflatePeer()
	require.Equal(t, msg, dc.Decompress(t, compress(t, d, mu, msg)))

	buf, n, err := d.CompressAlone(msg)
	require.NoError(t, err)
	alone := bytes.Clone((*buf)[:n])
	bufpool.Put(buf)
	buf, n, err = other.CompressAlone(msg)
	require.NoError(t, err)
	require.Equal(t, alone, (*buf)[:n])
	bufpool.Put(buf)
	require.Equal(t, d.Setting(), other.Setting())
	require.Equal(t, msg, dc.Decompress(t, alone))

	mu.Lock()
	d.DropContext()
	require.Nil(t, d.fw)
	mu.Unlock()
	require.Equal(t, msg, dc.Decompress(t, compress(t, d, mu, msg)))

	c := Config{Enabled: true, Level: 9}.WithDefaults()
	require.NotEqual(t, d.Setting(), NewState(Params{ServerMaxWindowBits: 15}, &c, true, nil).Setting())
	require.NotEqual(t, d.Setting(), NewState(Params{ServerMaxWindowBits: 10}, &c, true, nil).Setting())
}
