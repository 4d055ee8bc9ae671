package hist

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestIndexBounds(t *testing.T) {
	t.Parallel()
	vals := []uint64{0, 1, 127, 128, 255, 256, 257, 511, 512, 1000, 123456789, 1 << 40, 1<<63 + 12345, ^uint64(0)}
	for _, v := range vals {
		i := index(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("index(%d) = %d, want in [0, %d)", v, i, numBuckets)
		}
		lo, hi := bounds(i)
		if v < lo || v > hi {
			t.Errorf("bounds(index(%d)) = [%d, %d], want it to contain %d", v, lo, hi, v)
		}
		if lo > 0 && float64(hi-lo)/float64(lo) > 1.0/subCount {
			t.Errorf("bucket of %d is [%d, %d]: wider than 1/%d of its value", v, lo, hi, subCount)
		}
	}
	// Buckets must tile the value range without gaps or overlap.
	for i := 1; i < numBuckets; i++ {
		_, prevHi := bounds(i - 1)
		lo, _ := bounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bounds(%d).lo = %d, want %d (bounds(%d).hi + 1)", i, lo, prevHi+1, i-1)
		}
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	uniform := make([]uint64, 100000)
	for i := range uniform {
		uniform[i] = uint64(i + 1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	expo := make([]uint64, 50000)
	for i := range expo {
		expo[i] = uint64(rng.ExpFloat64()*200_000) + 30_000 // latencies in ns around 230 µs
	}
	tests := []struct {
		name string
		vals []uint64
		qs   []float64
	}{
		{"one value", []uint64{4242}, []float64{0.5, 0.99, 1}},
		{"small exact", []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []float64{0.1, 0.5, 0.9, 1}},
		{"uniform", uniform, []float64{0.5, 0.99, 0.999, 1}},
		{"exponential", expo, []float64{0.5, 0.99, 0.999}},
		{"bimodal", append(slices.Repeat([]uint64{100_000}, 990), slices.Repeat([]uint64{9_000_000}, 10)...), []float64{0.5, 0.99, 0.995}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h Histogram
			for _, v := range tt.vals {
				h.Record(v)
			}
			sorted := slices.Clone(tt.vals)
			slices.Sort(sorted)
			for _, q := range tt.qs {
				rank := int(float64(len(sorted))*q + 0.999999999)
				want := sorted[max(rank, 1)-1]
				got := h.Quantile(q)
				// Never below the exact value, and above it by at most one bucket width.
				if got < want || float64(got-want) > float64(want)/subCount+1 {
					t.Errorf("Quantile(%v) = %d, want %d (within 1/%d above)", q, got, want, subCount)
				}
			}
			if h.Count() != uint64(len(tt.vals)) {
				t.Errorf("Count() = %d, want %d", h.Count(), len(tt.vals))
			}
			if h.Max() != sorted[len(sorted)-1] || h.Min() != sorted[0] {
				t.Errorf("Min, Max = %d, %d, want %d, %d", h.Min(), h.Max(), sorted[0], sorted[len(sorted)-1])
			}
		})
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	var a, b, all Histogram
	for i := uint64(1); i <= 1000; i++ {
		all.Record(i * 1000)
		if i%3 == 0 {
			a.Record(i * 1000)
		} else {
			b.Record(i * 1000)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{})
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		if got, want := m.Quantile(q), all.Quantile(q); got != want {
			t.Errorf("merged Quantile(%v) = %d, want %d", q, got, want)
		}
	}
	if m.Count() != all.Count() || m.Min() != all.Min() || m.Max() != all.Max() || m.Mean() != all.Mean() {
		t.Errorf("merged count/min/max/mean = %d/%d/%d/%v, want %d/%d/%d/%v",
			m.Count(), m.Min(), m.Max(), m.Mean(), all.Count(), all.Min(), all.Max(), all.Mean())
	}
}

func TestEmpty(t *testing.T) {
	t.Parallel()
	var h Histogram
	if got := h.Quantile(0.99); got != 0 {
		t.Errorf("empty Quantile(0.99) = %d, want 0", got)
	}
}

func BenchmarkRecord(b *testing.B) {
	b.ReportAllocs()
	var h Histogram
	v := uint64(1)
	for b.Loop() {
		h.Record(v)
		v = v*6364136223846793005 + 1442695040888963407
	}
}
