package window_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// countingStore counts the calls that reach the wrapped store.
type countingStore struct {
	window.Store
	calls atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, now, reqs, res)
}

func TestOverLimitCache(t *testing.T) {
	t.Parallel()
	inner := &countingStore{Store: window.NewMemory()}
	c := window.NewOverLimitCache(inner)
	full := storetest.Req("full", 2, 1)
	other := storetest.Req("other", 10, 1)
	storetest.Take(t, c, storetest.T0, full)
	storetest.Take(t, c, storetest.T0, full) // now full: cached
	if n := c.Len(); n != 1 {
		t.Fatalf("Len = %d after filling, want 1", n)
	}
	before := inner.calls.Load()
	ok, res := storetest.Take(t, c, storetest.T0.Add(time.Second), full)
	if ok || !res[0].Over || res[0].Count != 2 {
		t.Errorf("cached denial = %v %+v, want denied, full over", ok, res)
	}
	if got := inner.calls.Load() - before; got != 0 {
		t.Errorf("a cached denial of one counter made %d store calls, want 0", got)
	}
	// With another counter, that one is read (one store call) and not counted.
	before = inner.calls.Load()
	ok, res = storetest.Take(t, c, storetest.T0.Add(time.Second), other, full)
	if ok || !res[1].Over || res[1].Count != 2 || res[0].Over || res[0].Skipped {
		t.Errorf("cached denial = %v %+v, want denied, full over, other read with room", ok, res)
	}
	if got := inner.calls.Load() - before; got != 1 {
		t.Errorf("a cached denial of two counters made %d store calls, want 1", got)
	}
	// The other counter was not consumed by the cached denial.
	if _, res := storetest.Take(t, c, storetest.T0, storetest.Req("other", 10, 0)); res[0].Count != 0 {
		t.Errorf("other count = %d, want 0", res[0].Count)
	}
	// The next window asks the store again.
	if ok, _ := storetest.Take(t, c, storetest.T0.Add(time.Minute), full); !ok {
		t.Error("next window denied")
	}
	// A refund through this cache forgets the full counter.
	storetest.Take(t, c, storetest.T0.Add(time.Minute), full)
	r := full
	r.Refund = true
	storetest.Take(t, c, storetest.T0.Add(time.Minute), r)
	if ok, _ := storetest.Take(t, c, storetest.T0.Add(time.Minute), full); !ok {
		t.Error("denied after a refund made room")
	}
	// Shadow and sliding counters are never cached.
	sh := storetest.Req("shadow", 1, 1)
	sh.Shadow = true
	sl := storetest.Req("sliding", 1, 1)
	sl.Algorithm = window.SlidingWindow
	for range 3 {
		storetest.Take(t, c, storetest.T0, sh)
		storetest.Take(t, c, storetest.T0, sl)
	}
	before = inner.calls.Load()
	storetest.Take(t, c, storetest.T0, sh)
	storetest.Take(t, c, storetest.T0, sl)
	if got := inner.calls.Load() - before; got != 2 {
		t.Errorf("%d store calls for shadow and sliding, want 2 (never cached)", got)
	}
	// Expired windows are swept.
	storetest.Take(t, c, storetest.T0.Add(time.Hour), storetest.Req("x", 5, 1))
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
	budget := storetest.Req("budget", 1000, 600)
	budget.Charge = true
	check := storetest.Req("budget", 1000, 0)
	storetest.Take(t, c, storetest.T0, budget)
	if ok, res := storetest.Take(t, c, storetest.T0, budget); ok || res[0].Count != 1200 {
		t.Fatalf("second charge = %v %+v, want denied with 1200 counted", ok, res)
	}
	if n := c.Len(); n != 1 {
		t.Fatalf("Len = %d after the budget was spent, want 1", n)
	}
	before := inner.calls.Load()
	if ok, res := storetest.Take(t, c, storetest.T0, check); ok || !res[0].Over {
		t.Errorf("check of a spent budget = %v %+v, want denied", ok, res)
	}
	if got := inner.calls.Load() - before; got != 0 {
		t.Errorf("a check of a cached budget made %d store calls, want 0", got)
	}
	// A late charge of a stream admitted before the budget ran out.
	before = inner.calls.Load()
	ok, res := storetest.Take(t, c, storetest.T0, budget)
	if ok || !res[0].Over || res[0].Count != 1800 || res[0].Skipped {
		t.Errorf("charge of a cached-full budget = %v %+v, want denied with 1800 counted", ok, res)
	}
	if got := inner.calls.Load() - before; got != 1 {
		t.Errorf("a charge made %d store calls, want 1", got)
	}
	// Known full through another counter: the charge still counts, the
	// admission counter of the denied request does not.
	full := storetest.Req("full", 1, 1)
	storetest.Take(t, c, storetest.T0, full)
	storetest.Take(t, c, storetest.T0, full)
	other := storetest.Req("other-budget", 100, 7)
	other.Charge = true
	rate := storetest.Req("rate", 10, 1)
	if ok, res := storetest.Take(t, c, storetest.T0, rate, other, full); ok || res[1].Count != 7 || !res[2].Over || res[0].Count != 0 {
		t.Errorf("charge beside a cached-full counter = %v %+v, want denied, 7 charged, rate untouched", ok, res)
	}
	if _, res := storetest.Take(t, c, storetest.T0, storetest.Req("rate", 10, 0)); res[0].Count != 0 {
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
	admitted := storetest.AdmitConcurrently(t, workers, each, storetest.Taking(storetest.T0, []window.Counter{storetest.Req("cached-conc", 60, 1)}, replicas...))
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
	full := storetest.Req("full", 2, 1)
	sliding := storetest.Req("sliding", 10, 1)
	sliding.Algorithm = window.SlidingWindow
	shadow := storetest.Req("shadow", 1, 1)
	shadow.Shadow = true
	refund := storetest.Req("a", 10, 1)
	refund.Refund = true
	tests := []struct {
		name  string
		prior []window.Counter // each taken once, straight from the store, before full fills
		reqs  []window.Counter // the denied request; full is known full
	}{
		{"2 counters", []window.Counter{storetest.Req("a", 10, 3)}, []window.Counter{storetest.Req("a", 10, 1), full}},
		{"3 counters", []window.Counter{storetest.Req("a", 10, 3), storetest.Req("b", 5, 4)}, []window.Counter{storetest.Req("a", 10, 2), full, storetest.Req("b", 5, 1)}},
		{"another over too", []window.Counter{storetest.Req("b", 5, 5)}, []window.Counter{storetest.Req("a", 10, 1), storetest.Req("b", 5, 1), full}},
		{"sliding and shadow", []window.Counter{sliding, shadow}, []window.Counter{sliding, shadow, full}},
		{"one counter twice", nil, []window.Counter{storetest.Req("a", 10, 6), storetest.Req("a", 10, 6), full}},
		{"a refund", []window.Counter{storetest.Req("a", 10, 4)}, []window.Counter{refund, full}},
	}
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					inner := &countingStore{Store: newStore(t)}
					c := window.NewOverLimitCache(inner)
					at := storetest.T0.Add(-time.Minute) // the previous window, for the sliding counter
					for _, r := range tt.prior {
						storetest.Take(t, inner, at, r)
					}
					at = storetest.T0.Add(10 * time.Second)
					for _, r := range tt.prior {
						storetest.Take(t, inner, at, r)
					}
					storetest.Take(t, c, at, full)
					storetest.Take(t, c, at, full) // full now, and cached
					counts := peekCounts(t, inner, at, tt.reqs)

					before := inner.calls.Load()
					ok, got := storetest.Take(t, c, at, tt.reqs...)
					if calls := inner.calls.Load() - before; calls != 1 {
						t.Errorf("cached denial made %d store calls, want 1", calls)
					}
					wantOK, want := storetest.Take(t, inner, at, tt.reqs...) // denied by the store itself: counts nothing
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
func peekCounts(t *testing.T, s window.Store, now time.Time, reqs []window.Counter) []uint64 {
	t.Helper()
	out := make([]uint64, len(reqs))
	for i, r := range reqs {
		r.Hits, r.Refund = 0, false
		_, res := storetest.Take(t, s, now, r)
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

// failingStore fails every Take once fail is set: wholly, or with partial
// set for its first request only.
type failingStore struct {
	window.Store
	fail, partial atomic.Bool
}

var errReadDown = errors.Join(window.ErrStore, errors.New("down"))

func (f *failingStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	if !f.fail.Load() {
		return f.Store.Take(ctx, now, reqs, res)
	}
	if !f.partial.Load() {
		return false, errReadDown
	}
	ok, err := f.Store.Take(ctx, now, reqs[1:], res[1:])
	if err != nil {
		return ok, err
	}
	res[0] = window.Result{}
	return ok, &window.PartialError{Failed: []int{0}, Err: errReadDown}
}

// TestOverLimitCachePeekFails: when the read of the other counters fails,
// wholly or in part, the cached counter still denies, the counters that
// were read are reported and the others skipped.
func TestOverLimitCachePeekFails(t *testing.T) {
	t.Parallel()
	full, a, b := storetest.Req("full", 2, 1), storetest.Req("a", 10, 1), storetest.Req("b", 10, 1)
	tests := []struct {
		name    string
		partial bool
		want    []window.Result
	}{
		{"wholly", false, []window.Result{{Skipped: true}, {Count: 2, Over: true}, {Skipped: true}}},
		{"in part", true, []window.Result{{Skipped: true}, {Count: 2, Over: true}, {Count: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner := &failingStore{Store: window.NewMemory()}
			c := window.NewOverLimitCache(inner)
			storetest.Take(t, c, storetest.T0, full)
			storetest.Take(t, c, storetest.T0, full)
			storetest.Take(t, c, storetest.T0, b)
			inner.fail.Store(true)
			inner.partial.Store(tt.partial)
			ok, res := storetest.Take(t, c, storetest.T0, a, full, b)
			if ok {
				t.Error("allowed, want denied")
			}
			for i := range tt.want {
				if res[i] != tt.want[i] {
					t.Errorf("result %d = %+v, want %+v", i, res[i], tt.want[i])
				}
			}
		})
	}
}

// TestOverLimitCacheBucketAndLog: a token bucket's or sliding log's denial
// of one hit is cached exactly until its Retry, with Retry and Empty as
// they are at each moment; denials of more hits, of a counter named twice,
// of shadows and of charges are not cached.
func TestOverLimitCacheBucketAndLog(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	bucket := window.Counter{Key: "test:{b}!token_bucket", Limit: 10, Size: time.Second, Hits: 1, Algorithm: window.TokenBucket}
	log := window.Counter{Key: "test:{l}!sliding_log", Limit: 2, Size: time.Second, Hits: 1, Algorithm: window.SlidingLog}
	tests := []struct {
		name   string
		r      window.Counter
		denied window.Result // the first denial, at the fill's end
		later  time.Duration // a moment before Retry
		cached window.Result // the cache's answer then
	}{
		{"bucket", bucket,
			window.Result{Count: 10, Over: true, Empty: time.Second, Retry: 100 * ms},
			60 * ms, window.Result{Count: 10, Over: true, Empty: 940 * ms, Retry: 40 * ms}},
		{"log", log,
			window.Result{Count: 2, Over: true, Empty: 1000 * ms, Retry: 700 * ms},
			500 * ms, window.Result{Count: 2, Over: true, Empty: 500 * ms, Retry: 200 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner := &countingStore{Store: window.NewMemory()}
			c := window.NewOverLimitCache(inner)
			// Fill: a bucket takes its burst at T0, the log one hit at T0 and one at T0+300ms.
			at := time.Duration(0)
			if tt.r.Algorithm == window.TokenBucket {
				full := tt.r
				full.Hits = 10
				storetest.Take(t, c, storetest.T0, full)
			} else {
				storetest.Take(t, c, storetest.T0, tt.r)
				at = 300 * ms
				storetest.Take(t, c, storetest.T0.Add(at), tt.r)
			}
			// Not cached: more hits, a shadow, a charge.
			more, shadow, charge := tt.r, tt.r, tt.r
			more.Hits, shadow.Shadow, charge.Charge = 2, true, true
			for _, reqs := range [][]window.Counter{{more}, {shadow}, {charge}} {
				storetest.Take(t, c, storetest.T0.Add(at), reqs...)
				if n := c.Len(); n != 0 {
					t.Fatalf("Len = %d after a denial of %+v, want 0", n, reqs)
				}
			}
			// The shadow and the charge were counted: give them back.
			back := tt.r
			back.Hits, back.Refund = 2, true
			storetest.Take(t, c, storetest.T0.Add(at), back)
			ok, res := storetest.Take(t, c, storetest.T0.Add(at), tt.r)
			if ok || res[0] != tt.denied {
				t.Fatalf("denial = %v %+v, want %+v", ok, res[0], tt.denied)
			}
			if n := c.Len(); n != 1 {
				t.Fatalf("Len = %d after a denial of one hit, want 1", n)
			}
			before := inner.calls.Load()
			check := tt.r
			check.Hits = 0
			for _, q := range []window.Counter{tt.r, check} {
				ok, res = storetest.Take(t, c, storetest.T0.Add(at+tt.later), q)
				if ok || res[0] != tt.cached {
					t.Errorf("cached denial of %d hits = %v %+v, want %+v", q.Hits, ok, res[0], tt.cached)
				}
			}
			retryAt := at + tt.denied.Retry
			ok, res = storetest.Take(t, c, storetest.T0.Add(retryAt-ms), tt.r)
			if ok || res[0].Retry != ms {
				t.Errorf("1 ms before Retry = %v %+v, want denied, Retry 1ms", ok, res[0])
			}
			if got := inner.calls.Load() - before; got != 0 {
				t.Errorf("cached denials made %d store calls, want 0", got)
			}
			// At Retry the store is asked again, and admits.
			if ok, res = storetest.Take(t, c, storetest.T0.Add(retryAt), tt.r); !ok {
				t.Errorf("at Retry = %v %+v, want allowed", ok, res[0])
			}
			if got := inner.calls.Load() - before; got != 1 {
				t.Errorf("at Retry: %d store calls, want 1", got)
			}
		})
	}
}

// TestOverLimitCacheLetsChecksAtTheLimit: a fixed window at exactly its
// limit is cached full for hits, but a check (Hits 0) still fits it and goes
// to the store; once a charge takes it past the limit, checks are denied
// from the cache too.
func TestOverLimitCacheLetsChecksAtTheLimit(t *testing.T) {
	t.Parallel()
	inner := &countingStore{Store: window.NewMemory()}
	c := window.NewOverLimitCache(inner)
	hit, check := storetest.Req("budget", 2, 1), storetest.Req("budget", 2, 0)
	charge := hit
	charge.Charge = true
	storetest.Take(t, c, storetest.T0, hit)
	storetest.Take(t, c, storetest.T0, hit) // at the limit: cached full
	for _, tc := range []struct {
		name      string
		req       window.Counter
		ok, store bool // allowed; reached the store
	}{
		{"a hit at the limit", hit, false, false},
		{"a check at the limit", check, true, true},
		{"a charge past the limit", charge, false, true},
		{"a check past the limit", check, false, false},
	} {
		before := inner.calls.Load()
		ok, _ := storetest.Take(t, c, storetest.T0.Add(time.Second), tc.req)
		if reached := inner.calls.Load() > before; ok != tc.ok || reached != tc.store {
			t.Errorf("%s: allowed %v, reached the store %v; want %v, %v", tc.name, ok, reached, tc.ok, tc.store)
		}
	}
}
