// Package queue is a FIFO over a slice with a head index, whose backing
// arrays come from shared pools: a queue that has emptied gives its array
// back (Release), so that an idle owner holds none and a steady flow of
// bursts does not allocate. It has no lock: its owner guards it.
package queue

import "sync"

// The arrays come in two sizes, each from its own pool; a queue that
// outgrows LargeCap grows its own, as append would.
const (
	SmallCap = 16
	LargeCap = 64
)

// Pool is the two pools of arrays that queues of T share. Its zero value
// is ready to use; it must not be copied.
type Pool[T any] struct{ small, large sync.Pool }

// Queue holds items of type T, oldest first. Its zero value is an empty
// queue with no array. A copy takes the items along: the original must
// not be used until it is set again.
type Queue[T any] struct {
	items []T   // items[head:] are queued
	head  int32 // the slots before it were emptied by Pop or Discard
}

// Len returns how many items are queued.
func (q *Queue[T]) Len() int { return len(q.items) - int(q.head) }

// Cap returns the capacity of the queue's array.
func (q *Queue[T]) Cap() int { return cap(q.items) }

// Items returns the queued items, oldest first, in the queue's array: they
// stay queued until Discard, Clear or Release.
func (q *Queue[T]) Items() []T { return q.items[q.head:] }

// Push queues a copy of *it, taking an array from p or a larger one when
// full. A pointer, stored without append, so that the item is copied once,
// into its slot: an inlined Push(p, it T) copied a large T twice, which
// cost more than the rest of Push.
func (q *Queue[T]) Push(p *Pool[T], it *T) {
	s := p.roomFor(q.items)
	q.items = s[:len(s)+1]
	q.items[len(s)] = *it
}

// roomFor returns s, or a copy of it in a larger array, with room for one
// more item.
func (p *Pool[T]) roomFor(s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	var r []T
	switch cap(s) {
	case 0:
		if a, ok := p.small.Get().(*[SmallCap]T); ok {
			return a[:0]
		}
		return make([]T, 0, SmallCap)
	case SmallCap:
		if a, ok := p.large.Get().(*[LargeCap]T); ok {
			r = a[:0]
		} else {
			r = make([]T, 0, LargeCap)
		}
	default:
		r = make([]T, 0, 2*cap(s))
	}
	r = append(r, s...)
	p.put(s)
	return r
}

// Pop removes and returns the oldest item; q must not be empty. The live
// items move to the front once as many slots are skipped, O(1) amortised.
func (q *Queue[T]) Pop() T {
	var zero T
	it := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if int(q.head) >= q.Len() {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return it
}

// Discard removes the n oldest items; the queue keeps its array.
func (q *Queue[T]) Discard(n int) {
	clear(q.items[q.head : int(q.head)+n])
	q.head += int32(n)
	if q.Len() == 0 {
		q.items, q.head = q.items[:0], 0
	}
}

// Clear removes every item; the queue keeps its array.
func (q *Queue[T]) Clear() {
	clear(q.items)
	q.items, q.head = q.items[:0], 0
}

// Release removes every item and gives the array back to p, if it came
// from such a pool: q is then empty with no array.
func (q *Queue[T]) Release(p *Pool[T]) {
	p.put(q.items)
	q.items, q.head = nil, 0
}

// put gives s's array back to its pool, if it has one, emptied; s must not
// be used after.
func (p *Pool[T]) put(s []T) {
	switch cap(s) {
	case SmallCap:
		a := (*[SmallCap]T)(s[:SmallCap])
		clear(a[:])
		p.small.Put(a)
	case LargeCap:
		a := (*[LargeCap]T)(s[:LargeCap])
		clear(a[:])
		p.large.Put(a)
	}
}
