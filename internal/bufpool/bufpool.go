// Package bufpool recycles byte buffers in power-of-two size classes from
// 512 bytes to 16 MiB, so that reading and writing messages does not
// allocate in steady state.
//
// Buffers travel as *[]byte so that returning one to a [sync.Pool] does
// not allocate. A buffer from [Get] has unspecified contents. After [Put]
// the caller must not touch the buffer again.
//
// The pools are private to this package: nothing outside can replace or
// reconfigure them.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	minShift = 9  // smallest class: 512 B
	maxShift = 24 // largest class: 16 MiB

	// MinSize is the smallest class size; every pooled buffer has at least
	// this capacity.
	MinSize = 1 << minShift
	// MaxSize is the largest class size. Larger buffers are allocated to
	// the exact size asked for and are never pooled.
	MaxSize = 1 << maxShift
)

var pools [maxShift - minShift + 1]sync.Pool

// class returns the index in pools of the smallest class that holds n
// bytes, for 0 <= n <= MaxSize.
func class(n int) int {
	if n <= MinSize {
		return 0
	}
	return bits.Len(uint(n-1)) - minShift
}

// Get returns a buffer with len(*b) == n. For n <= [MaxSize], cap(*b) is
// the smallest power of two that is at least n and at least [MinSize];
// larger buffers are allocated with cap(*b) == n. Get panics if n is
// negative, as make does.
func Get(n int) *[]byte {
	if n < 0 {
		panic("bufpool: negative size")
	}
	if n > MaxSize {
		b := make([]byte, n)
		return &b
	}
	c := class(n)
	if p, ok := pools[c].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<(c+minShift))
	return &b
}

// TryGet returns a pooled buffer with len(*b) == n, or nil if the pool of
// n's class is empty or n is outside the classes: it never allocates. A
// caller that must not commit memory a peer merely announced can still
// take a buffer the process already holds.
func TryGet(n int) *[]byte {
	if n < 0 || n > MaxSize {
		return nil
	}
	if p, ok := pools[class(n)].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	return nil
}

// Put returns b to the pool for reuse. Buffers whose capacity is not
// exactly a class size (such as ones larger than [MaxSize] or ones not
// from [Get]) are dropped for the garbage collector. Put(nil) does
// nothing.
func Put(b *[]byte) {
	if b == nil {
		return
	}
	c := cap(*b)
	if c < MinSize || c > MaxSize || c&(c-1) != 0 {
		return
	}
	pools[class(c)].Put(b)
}

// Append returns b with p appended (a nil b acts as an empty buffer), its
// capacity at least doubling when it must grow, past the pool's classes
// too, so that a buffer appended to piece by piece is copied O(log n)
// times. As with [Grow], the caller uses only the returned buffer.
func Append(b *[]byte, p []byte) *[]byte {
	k := 0
	if b != nil {
		k = len(*b)
		if n := k + len(p); n > cap(*b) {
			b = Grow(b, max(n, 2*cap(*b)))
		}
	}
	b = Grow(b, k+len(p))
	copy((*b)[k:], p)
	return b
}

// Grow returns a buffer of length n that starts with the contents of b
// (the first min(len(*b), n) bytes). If b's capacity suffices it is
// resliced and returned; otherwise the contents are copied into a buffer
// from [Get], b is given back with [Put], and the caller must use only the
// returned buffer from then on. A nil b acts as an empty buffer.
func Grow(b *[]byte, n int) *[]byte {
	if b == nil {
		return Get(n)
	}
	if n < 0 {
		panic("bufpool: negative size")
	}
	if n <= cap(*b) {
		*b = (*b)[:n]
		return b
	}
	nb := Get(n)
	copy(*nb, *b)
	Put(b)
	return nb
}
