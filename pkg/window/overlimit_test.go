package window_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// countingStore counts the calls that reach the wrapped store.
type countingStore struct {
	window.Store
	calls atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, now time.Time, reqs []window.Request, res []window.Result) (bool, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, now, reqs, res)
}

func TestOverLimitCache(t *testing.T) {
	t.Parallel()
	inner := &countingStore{Store: window.NewMemory()}
	c := window.NewOverLimitCache(inner)
	full := req("full", 2, 1)
	other := req("other", 10, 1)
	take(t, c, t0, full)
	take(t, c, t0, full) // now full: cached
	if n := c.Len(); n != 1 {
		t.Fatalf("Len = %d after filling, want 1", n)
	}
	before := inner.calls.Load()
	ok, res := take(t, c, t0.Add(time.Second), full)
	if ok || !res[0].Over || res[0].Count != 2 {
		t.Errorf("cached denial = %v %+v, want denied, full over", ok, res)
	}
	if got := inner.calls.Load() - before; got != 0 {
		t.Errorf("a cached denial of one counter made %d store calls, want 0", got)
	}
	// With another counter, that one is read (one store call) and not counted.
	before = inner.calls.Load()
	ok, res = take(t, c, t0.Add(time.Second), other, full)
	if ok || !res[1].Over || res[1].Count != 2 || res[0].Over || res[0].Skipped {
		t.Errorf("cached denial = %v %+v, want denied, full over, other read with room", ok, res)
	}
	if got := inner.calls.Load() - before; got != 1 {
		t.Errorf("a cached denial of two counters made %d store calls, want 1", got)
	}
	// The other counter was not consumed by the cached denial.
	if _, res := take(t, c, t0, req("other", 10, 0)); res[0].Count != 0 {
		t.Errorf("other count = %d, want 0", res[0].Count)
	}
	// The next window asks the store again.
	if ok, _ := take(t, c, t0.Add(time.Minute), full); !ok {
		t.Error("next window denied")
	}
	// A refund through this cache forgets the full counter.
	take(t, c, t0.Add(time.Minute), full)
	r := full
	r.Refund = true
	take(t, c, t0.Add(time.Minute), r)
	if ok, _ := take(t, c, t0.Add(time.Minute), full); !ok {
		t.Error("denied after a refund made room")
	}
	// Shadow and sliding counters are never cached.
	sh := req("shadow", 1, 1)
	sh.Shadow = true
	sl := req("sliding", 1, 1)
	sl.Algorithm = window.SlidingWindow
	for range 3 {
		take(t, c, t0, sh)
		take(t, c, t0, sl)
	}
	before = inner.calls.Load()
	take(t, c, t0, sh)
	take(t, c, t0, sl)
	if got := inner.calls.Load() - before; got != 2 {
		t.Errorf("%d store calls for shadow and sliding, want 2 (never cached)", got)
	}
	// Expired windows are swept.
	take(t, c, t0.Add(time.Hour), req("x", 5, 1))
	if n := c.Len(); n != 0 {
		t.Errorf("Len after an hour = %d, want 0", n)
	}
}

// TestOverLimitCacheStaysExact: two replicas, each with its own cache, over
// one Redis still admit exactly the limit.
func TestOverLimitCacheStaysExact(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	inner := []*countingStore{
		{Store: redisstore.New(srv.Client(t), redisstore.Options{})},
		{Store: redisstore.New(srv.Client(t), redisstore.Options{})},
	}
	replicas := []*window.OverLimitCache{window.NewOverLimitCache(inner[0]), window.NewOverLimitCache(inner[1])}
	const workers, each = 16, 25
	admitted := storetest.AdmitConcurrently(t, workers, each, storetest.Taking(t0, []window.Request{req("cached-conc", 60, 1)}, replicas...))
	if admitted != 60 {
		t.Errorf("admitted %d, want exactly 60", admitted)
	}
	if inner[0].calls.Load()+inner[1].calls.Load() == workers*each {
		t.Error("no denial came from the cache")
	}
}

// TestOverLimitCachePeek: a request that a cached full counter denies gets,
// for its other counters, what the store itself reports for that denied
// request, in one store call that counts nothing.
func TestOverLimitCachePeek(t *testing.T) {
	t.Parallel()
	full := req("full", 2, 1)
	sliding := req("sliding", 10, 1)
	sliding.Algorithm = window.SlidingWindow
	shadow := req("shadow", 1, 1)
	shadow.Shadow = true
	refund := req("a", 10, 1)
	refund.Refund = true
	tests := []struct {
		name  string
		prior []window.Request // each taken once, straight from the store, before full fills
		reqs  []window.Request // the denied request; full is known full
	}{
		{"2 counters", []window.Request{req("a", 10, 3)}, []window.Request{req("a", 10, 1), full}},
		{"3 counters", []window.Request{req("a", 10, 3), req("b", 5, 4)}, []window.Request{req("a", 10, 2), full, req("b", 5, 1)}},
		{"another over too", []window.Request{req("b", 5, 5)}, []window.Request{req("a", 10, 1), req("b", 5, 1), full}},
		{"sliding and shadow", []window.Request{sliding, shadow}, []window.Request{sliding, shadow, full}},
		{"one counter twice", nil, []window.Request{req("a", 10, 6), req("a", 10, 6), full}},
		{"a refund", []window.Request{req("a", 10, 4)}, []window.Request{refund, full}},
	}
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					inner := &countingStore{Store: newStore(t)}
					c := window.NewOverLimitCache(inner)
					at := t0.Add(-time.Minute) // the previous window, for the sliding counter
					for _, r := range tt.prior {
						take(t, inner, at, r)
					}
					at = t0.Add(10 * time.Second)
					for _, r := range tt.prior {
						take(t, inner, at, r)
					}
					take(t, c, at, full)
					take(t, c, at, full) // full now, and cached
					counts := peekCounts(t, inner, at, tt.reqs)

					before := inner.calls.Load()
					ok, got := take(t, c, at, tt.reqs...)
					if calls := inner.calls.Load() - before; calls != 1 {
						t.Errorf("cached denial made %d store calls, want 1", calls)
					}
					wantOK, want := take(t, inner, at, tt.reqs...) // denied by the store itself: counts nothing
					if ok || wantOK {
						t.Fatalf("allowed = %v (store: %v), want denied", ok, wantOK)
					}
					for i := range want {
						if tt.reqs[i].Refund {
							// Redis Cluster leaves a denied request's refunds
							// unread; the cache reports their count.
							want[i] = window.Result{Count: counts[i]}
						}
						if got[i] != want[i] {
							t.Errorf("result %d = %+v, want %+v (the store's)", i, got[i], want[i])
						}
					}
					if after := peekCounts(t, inner, at, tt.reqs); !equal(after, counts) {
						t.Errorf("counts after the denial = %v, want %v (unchanged)", after, counts)
					}
				})
			}
		})
	}
}

// peekCounts reads the current counts of reqs' counters without counting.
func peekCounts(t *testing.T, s window.Store, now time.Time, reqs []window.Request) []uint64 {
	t.Helper()
	out := make([]uint64, len(reqs))
	for i, r := range reqs {
		r.Hits, r.Refund = 0, false
		_, res := take(t, s, now, r)
		out[i] = res[0].Count
	}
	return out
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOverLimitCacheStale: a cached counter that a refund through another
// replica emptied is found with room by the read of a request with other
// counters, which is then sent and allowed; one that fails to be read still
// denies.
func TestOverLimitCacheStale(t *testing.T) {
	t.Parallel()
	full, other := req("full", 2, 1), req("other", 10, 1)
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inner := &countingStore{Store: newStore(t)}
			c1, c2 := window.NewOverLimitCache(inner), window.NewOverLimitCache(inner)
			take(t, c1, t0, full)
			take(t, c1, t0, full) // c1 knows it full
			back := full
			back.Refund = true
			take(t, c2, t0, back) // room for one, which c1 does not know
			before := inner.calls.Load()
			ok, res := take(t, c1, t0, other, full)
			if !ok || res[0].Count != 1 || res[1].Count != 2 {
				t.Errorf("after a refund elsewhere = %v %+v, want allowed, counts 1 and 2", ok, res)
			}
			if calls := inner.calls.Load() - before; calls != 2 {
				t.Errorf("%d store calls, want 2 (the read, then the request)", calls)
			}
			// Full again, and known full again.
			before = inner.calls.Load()
			if ok, _ := take(t, c1, t0, full); ok || inner.calls.Load() != before {
				t.Errorf("full counter alone: allowed %v, %d store calls; want a denial from the cache", ok, inner.calls.Load()-before)
			}
		})
	}
}

// failingStore fails every Take once fail is set.
type failingStore struct {
	window.Store
	fail atomic.Bool
}

var errReadDown = errors.New("down")

func (f *failingStore) Take(ctx context.Context, now time.Time, reqs []window.Request, res []window.Result) (bool, error) {
	if f.fail.Load() {
		return false, errReadDown
	}
	return f.Store.Take(ctx, now, reqs, res)
}

// TestOverLimitCachePeekFails: when the read of the other counters fails,
// the cached counter still denies and the others are reported skipped.
func TestOverLimitCachePeekFails(t *testing.T) {
	t.Parallel()
	inner := &failingStore{Store: window.NewMemory()}
	c := window.NewOverLimitCache(inner)
	full, other := req("full", 2, 1), req("other", 10, 1)
	take(t, c, t0, full)
	take(t, c, t0, full)
	inner.fail.Store(true)
	ok, res := take(t, c, t0, other, full)
	if ok || !res[0].Skipped || res[1] != (window.Result{Count: 2, Over: true}) {
		t.Errorf("denial with a failing read = %v %+v, want denied, other skipped, full over", ok, res)
	}
}
