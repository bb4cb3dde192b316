package load

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// Histogram is a log-linear latency histogram in the manner of HdrHistogram: values below 128
// are counted exactly, larger ones in 64 sub-buckets per power of two, so a recorded value is
// known to within 1/64 (1.6 %). It is safe for concurrent use (atomic counters), which lets
// every connection record into one shared histogram.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64
	min    atomic.Uint64 // stored as ^v so that the zero value means "none yet"
	max    atomic.Uint64
}

const (
	subBits     = 6
	subCount    = 1 << subBits // 64
	linearLimit = 2 * subCount // values below this are exact
	histBuckets = linearLimit + (64-subBits-1)*subCount
)

func bucketOf(v uint64) int {
	if v < linearLimit {
		return int(v)
	}
	e := bits.Len64(v) - (subBits + 1) // >= 1; v>>e is in [64, 128)
	return linearLimit + (e-1)*subCount + int(v>>e) - subCount
}

// bucketHigh is the largest value that falls into bucket i.
func bucketHigh(i int) uint64 {
	if i < linearLimit {
		return uint64(i)
	}
	e := (i-linearLimit)/subCount + 1
	m := uint64((i-linearLimit)%subCount + subCount)
	return (m+1)<<e - 1
}

// Record adds one value.
func (h *Histogram) Record(v uint64) {
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		old := h.max.Load()
		if v <= old || h.max.CompareAndSwap(old, v) {
			break
		}
	}
	for {
		old := h.min.Load()
		if (old != 0 && v >= ^old) || h.min.CompareAndSwap(old, ^v) {
			break
		}
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Min and Max are exact; they are 0 when nothing was recorded.
func (h *Histogram) Min() uint64 {
	if m := h.min.Load(); m != 0 {
		return ^m
	}
	return 0
}

func (h *Histogram) Max() uint64 { return h.max.Load() }

// Mean is exact.
func (h *Histogram) Mean() float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sum.Load()) / float64(n)
}

// Quantile returns the value at quantile q (0..1): the upper bound of the bucket holding it,
// capped by the exact maximum.
func (h *Histogram) Quantile(q float64) uint64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return min(bucketHigh(i), h.Max())
		}
	}
	return h.Max()
}
