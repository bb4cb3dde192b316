package queue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func items(q *Queue[int]) []int { return append([]int(nil), q.Items()...) }

// Pushing past each array's size moves the items to the next one, in order:
// SmallCap, LargeCap, then doubling.
func TestPushGrows(t *testing.T) {
	var p Pool[int]
	var q Queue[int]
	require.Zero(t, q.Cap())
	var want []int
	for i := range 4 * LargeCap {
		q.Push(&p, &i)
		want = append(want, i)
		switch {
		case i < SmallCap:
			require.Equal(t, SmallCap, q.Cap())
		case i < LargeCap:
			require.Equal(t, LargeCap, q.Cap())
		}
	}
	require.Equal(t, 4*LargeCap, q.Cap())
	require.Equal(t, want, items(&q))
	q.Release(&p)
	require.Zero(t, q.Len())
	require.Zero(t, q.Cap())
}

// Popping the oldest again and again, as OutboxDropOldest does, keeps the
// order and the array: the live items move to the front once as many slots
// are skipped.
func TestPopKeepsTheArray(t *testing.T) {
	var p Pool[int]
	var q Queue[int]
	for i := range 4 {
		q.Push(&p, &i)
	}
	for i := 4; i < 1000; i++ {
		require.Equal(t, i-4, q.Pop())
		q.Push(&p, &i)
		require.Equal(t, 4, q.Len())
		require.Equal(t, SmallCap, q.Cap())
	}
	require.Equal(t, []int{996, 997, 998, 999}, items(&q))
}

// Pop and Discard zero the slots they empty, so that the array keeps
// nothing alive; the queue resets once empty.
func TestDiscardClearsTheSlots(t *testing.T) {
	var p Pool[*int]
	var q Queue[*int]
	for i := range 5 {
		pi := &i
		q.Push(&p, &pi)
	}
	all := q.items
	require.NotNil(t, q.Pop())
	q.Discard(2)
	require.Equal(t, 2, q.Len())
	for _, it := range all[:3] {
		require.Nil(t, it)
	}
	q.Discard(2)
	require.Zero(t, q.Len())
	require.Zero(t, q.head, "empty: back to the start")
	require.Equal(t, SmallCap, q.Cap(), "the array stays")
	for _, it := range all {
		require.Nil(t, it)
	}
}

// A queue handed over by copy, as a writer takes a batch, leaves an
// emptied array to reuse (Clear), which a pool takes back emptied.
func TestClearAndRelease(t *testing.T) {
	var p Pool[*int]
	var q Queue[*int]
	for i := range 3 {
		pi := &i
		q.Push(&p, &pi)
	}
	batch := q
	q = Queue[*int]{}
	require.Len(t, batch.Items(), 3)
	all := batch.items
	batch.Clear()
	require.Zero(t, batch.Len())
	require.Equal(t, []*int{nil, nil, nil}, all)
	var none *int
	batch.Push(&p, &none)
	require.Equal(t, SmallCap, batch.Cap(), "cleared, not released")
	batch.Release(&p)
	require.Zero(t, batch.Cap())
}

// In steady state a queue that fills up to LargeCap and empties takes its
// arrays from the pools: no allocation.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	var p Pool[int]
	var q Queue[int]
	allocs := testing.AllocsPerRun(100, func() {
		for i := range LargeCap {
			q.Push(&p, &i)
		}
		q.Pop()
		q.Discard(10)
		q.Release(&p)
	})
	require.Zero(t, allocs)
}

// item is as large as an outbox's item.
type item struct {
	p    *int
	b    []byte
	f    func(error)
	n    uint64
	kind uint8
}

var one = 1

// A burst of pushes, then the writer's hand-over and release.
func BenchmarkPushBurst(b *testing.B) {
	var p Pool[item]
	var q, spare Queue[item]
	b.ReportAllocs()
	it := item{p: &one, b: nil, f: nil, kind: 1}
	for b.Loop() {
		for i := range 60 {
			it.n = uint64(i)
			q.Push(&p, &it)
		}
		batch := q
		q = spare
		batch.Clear()
		spare = batch
		q.Release(&p)
		spare.Release(&p)
	}
}
