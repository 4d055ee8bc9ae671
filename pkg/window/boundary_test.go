package window_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// burst returns n arrivals, in ms after storetest.T0, spread evenly over [from, from+span).
func burst(from, span int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + span*int64(i)/int64(n)
	}
	return out
}

// TestBoundaryBurstExample is the example worked through in
// docs/algorithms.md: 100 requests in 00:59 and 100 more in 01:00, 10 ms
// apart, against 100 per minute.
func TestBoundaryBurstExample(t *testing.T) {
	t.Parallel()
	arrival := burst(59_000, 2000, 200)
	for _, tt := range []struct {
		alg        window.Algorithm
		admitted   int
		secondHalf []int64 // ms after 01:00 of the admissions there
	}{
		{window.FixedWindow, 200, burst(0, 1000, 100)},
		// The previous window weighs (60000-x)/60000, so a hit fits once
		// 100*x/60000 >= 1: at x = 600 ms, and the next only at 1200 ms.
		{window.SlidingWindow, 101, []int64{600}},
	} {
		m := window.NewMemory()
		reqs := []window.Counter{{Key: "ex:{k}", Limit: 100, Size: time.Minute, Hits: 1, Algorithm: tt.alg}}
		res := make([]window.Result, 1)
		var n int
		var second []int64
		for _, ms := range arrival {
			ok, err := m.Take(context.Background(), time.UnixMilli(storetest.T0.UnixMilli()+ms), reqs, res)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				n++
				if ms >= 60_000 {
					second = append(second, ms-60_000)
				}
			}
		}
		if n != tt.admitted || !slices.Equal(second, tt.secondHalf) {
			t.Errorf("%v admitted %d, at %v ms after 01:00; want %d, at %v", tt.alg, n, second, tt.admitted, tt.secondHalf)
		}
	}
}
