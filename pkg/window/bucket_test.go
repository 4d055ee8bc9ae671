package window_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func TestBucketIntervalAndTolerance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit, burst uint64
		size         time.Duration
		interval     time.Duration
		tolerance    time.Duration
	}{
		{10, 0, time.Second, 100 * time.Millisecond, time.Second},
		{3, 0, time.Second, 333_333_334, 1_000_000_002}, // rounded up: never faster than the rate
		{3, 6, time.Second, 333_333_334, 2_000_000_004},
		{1, 1, window.MaxSize, window.MaxSize, window.MaxBucketSpan},           // capped
		{1000, 1 << 40, time.Hour, 3_600_000_000, window.MaxBucketSpan},        // burst x interval capped
		{0, 5, time.Second, 0, 0},                                              // admits nothing
		{1 << 62, 0, time.Millisecond, 1, window.MaxBucketSpan},                // more than one per ns
		{7, 0, time.Duration(7e9), time.Second, 7 * time.Second},               // exact
		{1_000_000, 2, time.Millisecond, time.Nanosecond, 2 * time.Nanosecond}, // the smallest interval
	}
	for _, tt := range tests {
		r := window.Counter{Limit: tt.limit, Burst: tt.burst, Size: tt.size, Algorithm: window.TokenBucket}
		if got := r.Interval(); got != tt.interval {
			t.Errorf("%d per %v: Interval() = %d, want %d", tt.limit, tt.size, got, tt.interval)
		}
		if got := r.Tolerance(); got != tt.tolerance {
			t.Errorf("%d per %v, burst %d: Tolerance() = %d, want %d", tt.limit, tt.size, tt.burst, got, tt.tolerance)
		}
	}
	for _, tt := range []struct{ empty, ttl time.Duration }{
		{0, time.Second}, {1, 1001 * time.Millisecond}, {time.Millisecond, 1001 * time.Millisecond},
		{time.Millisecond + 1, 1002 * time.Millisecond},
	} {
		if got := window.BucketTTL(tt.empty); got != tt.ttl {
			t.Errorf("BucketTTL(%v) = %v, want %v", tt.empty, got, tt.ttl)
		}
	}
}

// TestBucketCapacity: a bucket holds its burst (Limit when 0), and
// nothing at a Limit of 0, so Remaining never promises a hit it denies.
func TestBucketCapacity(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ limit, burst, capacity uint64 }{
		{10, 0, 10}, {10, 3, 3}, {10, 30, 30}, {0, 0, 0}, {0, 5, 0},
	} {
		r := window.Counter{Limit: tt.limit, Burst: tt.burst, Size: time.Second, Algorithm: window.TokenBucket}
		if got := r.Capacity(); got != tt.capacity {
			t.Errorf("limit %d burst %d: Capacity() = %d, want %d", tt.limit, tt.burst, got, tt.capacity)
		}
		if got := r.Remaining(window.Result{}, storetest.T0); got != tt.capacity {
			t.Errorf("limit %d burst %d: Remaining(full) = %d, want %d", tt.limit, tt.burst, got, tt.capacity)
		}
	}
}

// algoStep is one Take at T0+at of the requests reqs and the answer
// every store must give.
type algoStep struct {
	at      time.Duration
	reqs    []window.Counter
	allowed bool
	res     []window.Result
}

// TestBucketAndLogSemantics runs the token bucket's and the sliding log's
// arithmetic through every store: exact ns and ms, retries, charges,
// refunds, a limit of 0, hits above the burst and pending hits of one
// counter named twice.
func TestBucketAndLogSemantics(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	bucket := func(key string, limit, burst uint64, size time.Duration) func(hits uint64) window.Counter {
		return func(hits uint64) window.Counter {
			return window.Counter{Key: "test:{" + key + "}!token_bucket", Limit: limit, Burst: burst, Size: size, Hits: hits, Algorithm: window.TokenBucket}
		}
	}
	log := func(key string, limit uint64, size time.Duration) func(hits uint64) window.Counter {
		return func(hits uint64) window.Counter {
			return window.Counter{Key: "test:{" + key + "}!sliding_log", Limit: limit, Size: size, Hits: hits, Algorithm: window.SlidingLog}
		}
	}
	refund := func(r window.Counter) window.Counter { r.Refund = true; return r }
	charge := func(r window.Counter) window.Counter { r.Charge = true; return r }
	shadow := func(r window.Counter) window.Counter { r.Shadow = true; return r }
	b10 := bucket("b10", 10, 0, time.Second) // 100 ms a token, 1 s tolerance
	b3 := bucket("b3", 3, 0, time.Second)    // 333333334 ns a token
	b2 := bucket("b2", 2, 2, time.Second)    // 500 ms a token
	b0 := bucket("b0", 0, 0, time.Second)
	bBurst := bucket("bb", 10, 3, time.Second)
	bHuge := bucket("bh", 1, 1_000_000, window.MaxSize) // interval past MaxBucketSpan
	// 2^22 ns a token and a burst of 2^31: a Tolerance of exactly
	// MaxBucketSpan, which a capped cost must not fit past the burst.
	bSpan := bucket("bs", 1_953_125, 1<<31, 8192*time.Second)
	b7 := bucket("b7", 7, 0, time.Second) // 142857143 ns a token, an odd number
	l3 := log("l3", 3, 10*time.Second)
	l0 := log("l0", 0, 10*time.Second)
	span := window.MaxBucketSpan
	cases := map[string][]algoStep{
		"bucket": {
			{0, []window.Counter{b10(1)}, true, []window.Result{{Count: 1, Empty: 100 * ms}}},
			{0, []window.Counter{b10(9)}, true, []window.Result{{Count: 10, Empty: time.Second}}},
			{0, []window.Counter{b10(1)}, false, []window.Result{{Count: 10, Empty: time.Second, Over: true, Retry: 100 * ms}}},
			{50 * ms, []window.Counter{b10(1)}, false, []window.Result{{Count: 10, Empty: 950 * ms, Over: true, Retry: 50 * ms}}},
			{100 * ms, []window.Counter{b10(1)}, true, []window.Result{{Count: 10, Empty: time.Second}}},
			{100 * ms, []window.Counter{b10(0)}, false, []window.Result{{Count: 10, Empty: time.Second, Over: true, Retry: 100 * ms}}},
			{2 * time.Second, []window.Counter{b10(0)}, true, []window.Result{{}}},
		},
		"bucket rounding": {
			{0, []window.Counter{b3(1)}, true, []window.Result{{Count: 1, Empty: 333_333_334}}},
			{1 * ms, []window.Counter{b3(1)}, true, []window.Result{{Count: 2, Empty: 665_666_668}}},
			{1 * ms, []window.Counter{b3(2)}, false, []window.Result{{Count: 2, Empty: 665_666_668, Over: true, Retry: 332_333_334}}},
		},
		"bucket charge and refund": {
			{0, []window.Counter{charge(b2(5))}, false, []window.Result{{Count: 5, Empty: 2500 * ms, Over: true}}}, // never fits: Retry = Empty before
			{0, []window.Counter{b2(1)}, false, []window.Result{{Count: 5, Empty: 2500 * ms, Over: true, Retry: 2 * time.Second}}},
			{0, []window.Counter{refund(b2(3))}, true, []window.Result{{Count: 2, Empty: time.Second}}},
			{400 * ms, []window.Counter{refund(b2(10))}, true, []window.Result{{}}},
			{400 * ms, []window.Counter{b2(2)}, true, []window.Result{{Count: 2, Empty: time.Second}}},
		},
		"bucket limit 0": {
			{0, []window.Counter{b0(1)}, false, []window.Result{{Over: true}}},
			{0, []window.Counter{charge(b0(3))}, false, []window.Result{{Over: true}}},
			{0, []window.Counter{b0(0)}, false, []window.Result{{Over: true}}},
		},
		"bucket hits above burst": {
			{0, []window.Counter{bBurst(4)}, false, []window.Result{{Over: true}}},
			{0, []window.Counter{bBurst(3)}, true, []window.Result{{Count: 3, Empty: 300 * ms}}},
			{0, []window.Counter{bBurst(4)}, false, []window.Result{{Count: 3, Empty: 300 * ms, Over: true, Retry: 300 * ms}}},
		},
		"bucket capped span": {
			{0, []window.Counter{bHuge(1)}, true, []window.Result{{Count: 1, Empty: span}}},
			{0, []window.Counter{bHuge(1)}, false, []window.Result{{Count: 1, Empty: span, Over: true, Retry: span}}},
			{0, []window.Counter{charge(bHuge(5))}, false, []window.Result{{Count: 1, Empty: span, Over: true, Retry: span}}},
		},
		"bucket tolerance of MaxBucketSpan": {
			{0, []window.Counter{bSpan(1<<31 + 1)}, false, []window.Result{{Over: true}}},
			{0, []window.Counter{bSpan(1 << 31)}, true, []window.Result{{Count: 1 << 31, Empty: span}}},
		},
		"bucket charged to MaxBucketSpan": {
			{0, []window.Counter{charge(b7(1 << 40))}, false, []window.Result{{Count: 63050395, Empty: span, Over: true}}},
			// Retry = span + one interval - Tolerance, exact to the ns
			// although span + one interval is odd and past 2^53.
			{0, []window.Counter{b7(1)}, false, []window.Result{{Count: 63050395, Empty: span, Over: true, Retry: span - 857_142_858}}},
		},
		"bucket pending": {
			{0, []window.Counter{b2(1), b2(1)}, true, []window.Result{{Count: 1, Empty: 500 * ms}, {Count: 2, Empty: time.Second}}},
			{time.Second, []window.Counter{b2(1), b2(1), shadow(b2(1))}, true,
				[]window.Result{{Count: 1, Empty: 500 * ms}, {Count: 2, Empty: time.Second}, {Count: 3, Empty: 1500 * ms, Over: true}}}, // never fits: Retry = Empty before
			{time.Second, []window.Counter{b2(0)}, false, []window.Result{{Count: 3, Empty: 1500 * ms, Over: true, Retry: time.Second}}},
		},
		"log": {
			{0, []window.Counter{l3(2)}, true, []window.Result{{Count: 2, Empty: 10 * time.Second}}},
			{time.Second, []window.Counter{l3(1)}, true, []window.Result{{Count: 3, Empty: 10 * time.Second}}},
			{2 * time.Second, []window.Counter{l3(1)}, false, []window.Result{{Count: 3, Empty: 9 * time.Second, Over: true, Retry: 8 * time.Second}}},
			{2 * time.Second, []window.Counter{l3(2)}, false, []window.Result{{Count: 3, Empty: 9 * time.Second, Over: true, Retry: 8 * time.Second}}},
			{2 * time.Second, []window.Counter{l3(3)}, false, []window.Result{{Count: 3, Empty: 9 * time.Second, Over: true, Retry: 9 * time.Second}}},
			{2 * time.Second, []window.Counter{l3(4)}, false, []window.Result{{Count: 3, Empty: 9 * time.Second, Over: true, Retry: 9 * time.Second}}},
			{2 * time.Second, []window.Counter{l3(0)}, false, []window.Result{{Count: 3, Empty: 9 * time.Second, Over: true, Retry: 8 * time.Second}}},
			{10 * time.Second, []window.Counter{l3(1)}, true, []window.Result{{Count: 2, Empty: 10 * time.Second}}},
			{10 * time.Second, []window.Counter{refund(l3(1))}, true, []window.Result{{Count: 1, Empty: time.Second}}},
			{10 * time.Second, []window.Counter{charge(l3(10))}, false, []window.Result{{Count: 5, Empty: 10 * time.Second, Over: true, Retry: time.Second}}},
			{10*time.Second + 500*ms, []window.Counter{refund(l3(2))}, true, []window.Result{{Count: 3, Empty: 9500 * ms}}},
			{11 * time.Second, []window.Counter{l3(1)}, true, []window.Result{{Count: 3, Empty: 10 * time.Second}}}, // the hit at 1 s left
			{11 * time.Second, []window.Counter{l3(1)}, false, []window.Result{{Count: 3, Empty: 10 * time.Second, Over: true, Retry: 9 * time.Second}}},
			{21 * time.Second, []window.Counter{l3(0)}, true, []window.Result{{}}},
		},
		"log limit 0": {
			{0, []window.Counter{l0(1)}, false, []window.Result{{Over: true}}},
			{0, []window.Counter{l0(0)}, false, []window.Result{{Over: true}}},
		},
		"log pending": {
			{0, []window.Counter{l3(2), l3(2)}, false, []window.Result{{}, {Over: true}}},
			{0, []window.Counter{l3(1), l3(2)}, true, []window.Result{{Count: 1, Empty: 10 * time.Second}, {Count: 3, Empty: 10 * time.Second}}},
			{time.Second, []window.Counter{l3(0), shadow(l3(1))}, false,
				[]window.Result{{Count: 3, Empty: 9 * time.Second, Over: true, Retry: 9 * time.Second}, {Count: 3, Empty: 9 * time.Second, Over: true, Retry: 9 * time.Second}}},
		},
	}
	for kind, newStore := range stores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			for name, steps := range cases {
				for i, st := range steps {
					reqs := make([]window.Counter, len(st.reqs))
					for j, r := range st.reqs {
						r.Key = name + ":" + r.Key // a case's counters are its own
						reqs[j] = r
					}
					ok, res := storetest.Take(t, s, storetest.T0.Add(st.at), reqs...)
					if ok != st.allowed || fmt.Sprint(res) != fmt.Sprint(st.res) {
						t.Errorf("%s step %d: Take = %v %+v, want %v %+v", name, i, ok, res, st.allowed, st.res)
					}
				}
			}
		})
	}
}

// TestBucketAndLogGuarantee drives one counter of each algorithm with
// random arrivals and hits through Memory and checks the guarantee: over
// any interval T a bucket admits at most burst + rate x T, a log at most
// its limit in any window.
func TestBucketAndLogGuarantee(t *testing.T) {
	t.Parallel()
	for _, r := range storetest.GuaranteeRequests() {
		for seed := range uint64(4) {
			m := window.NewMemory()
			storetest.Guarantee(t, seed, 1500, r, m)
		}
	}
}
