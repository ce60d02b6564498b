package hdr

import (
	"math"
	"math/bits"
)

const (
	subBits = 7
	sub     = 1 << subBits
	// nBuckets covers every non-negative int64: shifts 0..(63-subBits-1).
	nBuckets = sub + (64-subBits-1)*sub
)

// Histogram counts values in log-linear buckets. The zero value is empty and
// ready to use.
type Histogram struct {
	counts [nBuckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

func index(v uint64) int {
	if v < sub {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	top := v >> uint(shift) // in [sub, 2*sub)
	return sub + shift*sub + int(top-sub)
}

// bounds returns the smallest and largest value that map to bucket i.
func bounds(i int) (lo, hi uint64) {
	if i < sub {
		return uint64(i), uint64(i)
	}
	shift := uint((i - sub) / sub)
	top := uint64(sub + (i-sub)%sub)
	lo = top << shift
	hi = lo + (uint64(1) << shift) - 1
	return lo, hi
}

// Record adds one value.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[index(uint64(v))]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest recorded value (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest recorded value (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean of the recorded values (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q in [0,1]: the midpoint of the
// bucket holding the ceil(q*n)-th smallest value, clamped to [Min, Max].
// It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	if math.IsNaN(q) || q <= 0 {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bounds(i)
			mid := int64(lo + (hi-lo)/2)
			return min(max(mid, h.min), h.max)
		}
	}
	return h.max
}
