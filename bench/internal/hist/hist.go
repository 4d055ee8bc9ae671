// Package hist is a small log-linear latency histogram in the spirit of HdrHistogram.
//
// Values below 2^subBits are counted exactly; above that each power of two is split into 2^subBits linear
// buckets, so a recorded value is known to within 1/2^subBits (0.8%) of itself. A Histogram is a fixed array:
// Record never allocates, which matters because the load generator shares two cores with the server it measures.
package hist

import (
	"math"
	"math/bits"
)

const (
	subBits  = 7
	subCount = 1 << subBits
	// maxShift covers every uint64: bits.Len64 is at most 64, and values of subBits+1 bits have shift 0.
	maxShift   = 64 - subBits - 1
	numBuckets = maxShift*subCount + 2*subCount
)

// Histogram counts non-negative values (the load generator records nanoseconds). The zero value is empty and
// ready to use. It is not safe for concurrent use: give each goroutine its own and Merge them at the end.
type Histogram struct {
	counts [numBuckets]uint64
	total  uint64
	min    uint64
	max    uint64
	sum    float64
}

// index returns the bucket of v.
func index(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift*subCount + int(v>>uint(shift))
}

// bounds returns the smallest and largest value that index maps to i.
func bounds(i int) (lo, hi uint64) {
	if i < 2*subCount {
		return uint64(i), uint64(i)
	}
	shift := i/subCount - 1
	m := uint64(i - shift*subCount)
	lo = m << uint(shift)
	return lo, lo + (1 << uint(shift)) - 1
}

// Record counts one value.
func (h *Histogram) Record(v uint64) {
	h.counts[index(v)]++
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.total += o.total
	h.sum += o.sum
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Max returns the largest recorded value, 0 when empty.
func (h *Histogram) Max() uint64 { return h.max }

// Min returns the smallest recorded value, 0 when empty.
func (h *Histogram) Min() uint64 { return h.min }

// Mean returns the arithmetic mean of the recorded values, NaN when empty.
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return math.NaN()
	}
	return h.sum / float64(h.total)
}

// Quantile returns the value at quantile q (0 < q <= 1): the highest value equivalent to the bucket holding the
// ceil(q*n)-th smallest value, clamped to [Min, Max]. Like HdrHistogram it never under-reports. It returns 0 when
// the histogram is empty.
func (h *Histogram) Quantile(q float64) uint64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.total {
		rank = h.total
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bounds(i)
			return min(max(hi, h.min), h.max)
		}
	}
	return h.max
}
