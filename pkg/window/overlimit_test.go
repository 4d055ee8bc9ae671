package window_test

import (
	"context"
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
	ok, res := take(t, c, t0.Add(time.Second), other, full)
	if ok || !res[1].Over || res[1].Count != 2 || !res[0].Skipped {
		t.Errorf("cached denial = %v %+v, want denied, full over, other skipped", ok, res)
	}
	if got := inner.calls.Load() - before; got != 0 {
		t.Errorf("a cached denial made %d store calls, want 0", got)
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

// TestOverLimitCacheCountsCharges: a request with a charge reaches the store
// even when a counter of it is known full, that counter included, so the
// charge is counted; the admission counters of the denied request are not.
func TestOverLimitCacheCountsCharges(t *testing.T) {
	t.Parallel()
	inner := &countingStore{Store: window.NewMemory()}
	c := window.NewOverLimitCache(inner)
	budget := req("budget", 1000, 600)
	budget.Charge = true
	check := req("budget", 1000, 0)
	take(t, c, t0, budget)
	if ok, res := take(t, c, t0, budget); ok || res[0].Count != 1200 {
		t.Fatalf("second charge = %v %+v, want denied with 1200 counted", ok, res)
	}
	if n := c.Len(); n != 1 {
		t.Fatalf("Len = %d after the budget was spent, want 1", n)
	}
	before := inner.calls.Load()
	if ok, res := take(t, c, t0, check); ok || !res[0].Over {
		t.Errorf("check of a spent budget = %v %+v, want denied", ok, res)
	}
	if got := inner.calls.Load() - before; got != 0 {
		t.Errorf("a check of a cached budget made %d store calls, want 0", got)
	}
	// A late charge of a stream admitted before the budget ran out.
	before = inner.calls.Load()
	ok, res := take(t, c, t0, budget)
	if ok || !res[0].Over || res[0].Count != 1800 || res[0].Skipped {
		t.Errorf("charge of a cached-full budget = %v %+v, want denied with 1800 counted", ok, res)
	}
	if got := inner.calls.Load() - before; got != 1 {
		t.Errorf("a charge made %d store calls, want 1", got)
	}
	// Known full through another counter: the charge still counts, the
	// admission counter of the denied request does not.
	full := req("full", 1, 1)
	take(t, c, t0, full)
	take(t, c, t0, full)
	other := req("other-budget", 100, 7)
	other.Charge = true
	rate := req("rate", 10, 1)
	if ok, res := take(t, c, t0, rate, other, full); ok || res[1].Count != 7 || !res[2].Over || res[0].Count != 0 {
		t.Errorf("charge beside a cached-full counter = %v %+v, want denied, 7 charged, rate untouched", ok, res)
	}
	if _, res := take(t, c, t0, req("rate", 10, 0)); res[0].Count != 0 {
		t.Errorf("rate = %d after a denied request, want 0", res[0].Count)
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
