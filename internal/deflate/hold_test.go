package deflate

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// withHoldLimit sets the budget of held compressors for one test, which
// must not run in parallel with others that compress (the count is
// process-wide).
func withHoldLimit(t *testing.T, n int64) {
	require.Zero(t, heldCount.Load(), "a compressor is held from an earlier test")
	require.Zero(t, lentCount.Load(), "a compressor is lent from an earlier test")
	old := holdLimit
	holdLimit = n
	t.Cleanup(func() { holdLimit = old })
}

// withLendLimit is withHoldLimit for the compressors lent for a batch.
func withLendLimit(t *testing.T, n int64) {
	old := lendLimit
	lendLimit = n
	t.Cleanup(func() { lendLimit = old })
}

// receiver is the peer's side of one direction: a client state whose
// inflater keeps exactly the window that the server's bits allow, so that a
// back-reference past it fails.
func receiver(bits int) *State {
	c := Config{Enabled: true}.WithDefaults()
	return NewState(Params{ServerMaxWindowBits: bits, ClientMaxWindowBits: MaxWindowBits}, &c, false, new(sync.Mutex))
}

// kept reports, under the lock, whether d holds a compressor and the bytes
// it keeps (a copy).
func kept(d *State, mu *sync.Mutex) (holds bool, recent []byte) {
	mu.Lock()
	defer mu.Unlock()
	if d.recent != nil {
		recent = bytes.Clone(*d.recent)
	}
	return d.fw != nil, recent
}

func (d *State) inflateOne(t *testing.T, z []byte) []byte {
	t.Helper()
	buf, n, err := d.Inflate(append(bytes.Clone(z), Tail...), -1, nil)
	require.NoError(t, err)
	defer bufpool.Put(buf)
	return bytes.Clone((*buf)[:n])
}

// event is a JSON-like message that shares most of its bytes with the
// other events.
func event(i int) []byte {
	return fmt.Appendf(nil, `{"id":%d,"user":"user-%d","event":"order.created","amount":%d.%02d,"tags":["web","eu"],"ok":true,"note":%q}`,
		i, i%7, i*37%1000, i%100, strings.Repeat("lorem ipsum ", 40+i%5))
}

// TestHoldBudget has many connections compress at once, each with its own
// lock, and checks that no more than the budget hold a compressor between
// messages, that the others keep their last bytes instead, and that every
// message decodes on its peer and refers back to the one before.
func TestHoldBudget(t *testing.T) {
	const conns, limit, rounds = 40, 5, 3
	withHoldLimit(t, limit)
	states := make([]*State, conns)
	locks := make([]*sync.Mutex, conns)
	for i := range states {
		states[i], locks[i] = locked(t, Params{})
	}
	sizes := make([][]int, conns)
	sent := make([][]byte, conns)
	var wg sync.WaitGroup
	for i := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := receiver(MaxWindowBits)
			for r := range rounds {
				msg := event(i*rounds + r)
				locks[i].Lock()
				buf, n, err := states[i].Compress(msg, false)
				z := bytes.Clone((*buf)[:n])
				bufpool.Put(buf)
				h := heldCount.Load()
				locks[i].Unlock()
				if err != nil || h > limit {
					t.Errorf("conn %d: err %v, %d held (budget %d)", i, err, h, limit)
					return
				}
				if got := peer.inflateOne(t, z); !bytes.Equal(got, msg) {
					t.Errorf("conn %d message %d: decoded %q", i, r, got)
				}
				sizes[i] = append(sizes[i], len(z))
				sent[i] = append(sent[i], msg...)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, limit, heldCount.Load())
	holding, primed := 0, 0
	for i, d := range states {
		holds, recent := kept(d, locks[i])
		if holds {
			holding++
			require.Nil(t, recent)
		} else {
			primed++
			require.Equal(t, sent[i][max(0, len(sent[i])-primeSize):], recent, "conn %d keeps the last bytes it sent", i)
		}
		require.Less(t, sizes[i][1], sizes[i][0]/2, "conn %d: the second message refers back to the first", i)
	}
	require.Equal(t, limit, holding)
	require.Equal(t, conns-limit, primed)

	for i, d := range states {
		locks[i].Lock()
		d.Release()
		locks[i].Unlock()
		holds, recent := kept(d, locks[i])
		require.False(t, holds)
		require.Nil(t, recent)
	}
	require.Zero(t, heldCount.Load())
}

// TestPrimedWindow sends messages past the budget (none held) through
// windows of 8 to 15 bits, messages shorter and longer than what is kept,
// to a peer whose window is exactly the negotiated one.
func TestPrimedWindow(t *testing.T) {
	withHoldLimit(t, 0)
	long := randomLetters(10000)
	for _, bits := range []int{8, 9, 12, 15} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			d, mu := locked(t, Params{ServerMaxWindowBits: bits})
			d.writeBits = bits // locked sets 15
			peer := receiver(bits)
			msgs := [][]byte{event(1), event(2), long, event(3), long[:300], long[:300], event(4), long[5000:], event(5)}
			for i, msg := range msgs {
				z := compress(t, d, mu, msg)
				require.Equal(t, msg, peer.inflateOne(t, z), "message %d", i)
				holds, recent := kept(d, mu)
				require.False(t, holds)
				all := bytes.Join(msgs[:i+1], nil)
				require.Equal(t, all[max(0, len(all)-min(primeSize, 1<<bits)):], recent, "message %d: the last bytes sent, in order", i)
				if i == 5 && 1<<bits > 300 {
					require.Less(t, len(z), 20, "a repeat refers back")
				}
			}
			require.Zero(t, heldCount.Load())
		})
	}
}

// TestIdleReleaseDropsRecent checks that the bytes kept go with the idle
// release, and that DropContext drops them too.
func TestIdleReleaseDropsRecent(t *testing.T) {
	withHoldLimit(t, 0)
	d, mu := locked(t, Params{})
	msg := randomLetters(1000)
	peer := testkit.NewDeflatePeer()
	first := compress(t, d, mu, msg)
	require.Equal(t, msg, peer.Decompress(t, first))
	d.releaseIdle() // clears "used recently"
	d.releaseIdle() // gives the bytes back
	_, recent := kept(d, mu)
	require.Nil(t, recent)
	again := compress(t, d, mu, msg)
	require.Equal(t, msg, peer.Decompress(t, again))
	require.Equal(t, len(first), len(again), "after the release, from an empty window")

	require.Less(t, len(compress(t, d, mu, msg)), len(first)/10)
	mu.Lock()
	d.DropContext()
	mu.Unlock()
	_, recent = kept(d, mu)
	require.Nil(t, recent)
	require.Equal(t, len(first), len(compress(t, d, mu, msg)))
}

// TestStreamPrimedAndBudget starts a stream on a connection that keeps its
// last bytes: the stream refers back to them; at its end the compressor is
// held if the budget has room, and given back otherwise.
func TestStreamPrimedAndBudget(t *testing.T) {
	withHoldLimit(t, 0)
	d, mu := locked(t, Params{})
	msg := randomLetters(2000)
	peer := receiver(MaxWindowBits)
	require.Equal(t, msg, peer.inflateOne(t, compress(t, d, mu, msg)))

	stream := func() []byte {
		s := d.StartStream(0, 4096)
		_, recent := kept(d, mu)
		require.Nil(t, recent, "the stream's bytes will not be kept")
		require.NoError(t, s.Write(msg))
		require.NoError(t, s.Flush())
		buf, n := s.Fragment(true)
		z := bytes.Clone((*buf)[:n])
		s.Sent()
		mu.Lock()
		s.End(true)
		mu.Unlock()
		return z
	}
	z := stream()
	require.Less(t, len(z), 100, "the stream refers back to the message before")
	require.Equal(t, msg, peer.inflateOne(t, z))
	holds, recent := kept(d, mu)
	require.False(t, holds, "no room in the budget")
	require.Nil(t, recent)
	first := compress(t, d, mu, msg)
	require.Equal(t, msg, peer.inflateOne(t, first))
	require.Greater(t, len(first), len(msg)/2, "nothing kept after the stream: from an empty window")

	holdLimit = 1
	z = stream() // primed with the message before, then held: the budget has room
	require.Less(t, len(z), 100)
	require.Equal(t, msg, peer.inflateOne(t, z))
	holds, _ = kept(d, mu)
	require.True(t, holds)
	require.EqualValues(t, 1, heldCount.Load())
	again := compress(t, d, mu, msg)
	require.Equal(t, msg, peer.inflateOne(t, again))
	require.Less(t, len(again), 100, "the held compressor has the stream in its window")
	mu.Lock()
	d.Release()
	mu.Unlock()
	require.Zero(t, heldCount.Load())
}

// TestLendForBatch compresses batches of messages (corked) on three
// connections past the budget with room to lend two compressors: two keep
// theirs for the batch, the third primes one for each message; EndBatch
// gives the lent ones back and the last bytes stay for the next message.
func TestLendForBatch(t *testing.T) {
	withHoldLimit(t, 0)
	withLendLimit(t, 2)
	var states [3]*State
	var locks [3]*sync.Mutex
	var peers [3]*State
	for i := range states {
		states[i], locks[i] = locked(t, Params{})
		peers[i] = receiver(MaxWindowBits)
	}
	send := func(i, n int, corked bool) int {
		msg := event(n)
		locks[i].Lock()
		buf, k, err := states[i].Compress(msg, corked)
		z := bytes.Clone((*buf)[:k])
		bufpool.Put(buf)
		locks[i].Unlock()
		require.NoError(t, err)
		require.Equal(t, msg, peers[i].inflateOne(t, z))
		return len(z)
	}
	for n := range 4 {
		for i := range states {
			size := send(i, n, true)
			if n > 0 {
				require.Less(t, size, 150, "conn %d message %d refers back", i, n)
			}
		}
	}
	require.EqualValues(t, 2, lentCount.Load())
	require.Zero(t, heldCount.Load())
	for i, want := range []bool{true, true, false} {
		holds, recent := kept(states[i], locks[i])
		require.Equal(t, want, holds, "conn %d", i)
		require.NotNil(t, recent, "conn %d keeps its last bytes for after the batch", i)
	}
	for i := range states {
		locks[i].Lock()
		states[i].EndBatch()
		locks[i].Unlock()
		holds, recent := kept(states[i], locks[i])
		require.False(t, holds)
		require.Equal(t, event(3), recent[len(recent)-len(event(3)):])
	}
	require.Zero(t, lentCount.Load())
	for i := range states {
		require.Less(t, send(i, 4, false), 150, "conn %d: primed after the batch", i)
	}
	var none *State
	none.EndBatch() // a connection without compression
}

// TestEndBatchHolds checks that a compressor lent for a batch is held at its
// end once the budget has room again.
func TestEndBatchHolds(t *testing.T) {
	withHoldLimit(t, 1)
	withLendLimit(t, 1)
	a, amu := locked(t, Params{})
	b, bmu := locked(t, Params{})
	compress(t, a, amu, event(1))
	bmu.Lock()
	buf, _, err := b.Compress(event(2), true)
	bufpool.Put(buf)
	bmu.Unlock()
	require.NoError(t, err)
	require.EqualValues(t, 1, heldCount.Load())
	require.EqualValues(t, 1, lentCount.Load())

	amu.Lock()
	a.Release()
	amu.Unlock()
	bmu.Lock()
	b.EndBatch()
	bmu.Unlock()
	holds, recent := kept(b, bmu)
	require.True(t, holds)
	require.Nil(t, recent)
	require.EqualValues(t, 1, heldCount.Load())
	require.Zero(t, lentCount.Load())
	bmu.Lock()
	b.Release()
	bmu.Unlock()
	require.Zero(t, heldCount.Load())
}
