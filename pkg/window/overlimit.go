package window

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// OverLimitCache remembers fixed-window counters that are full and denies
// requests that need one of them, until the window ends. It is exact for
// fixed windows, because a counter only grows within its window: once
// count >= limit, no hit fits until the next window. A key under attack
// therefore costs no Redis traffic. A check (Hits 0) of a fixed window is
// denied here only when the count seen was past the limit; at the limit it
// fits (see Counter.Hits), and goes to the store.
//
// TokenBucket and SlidingLog counters only free room as time passes too,
// so a denial of one is cached until its Retry, exactly the time the store
// would deny a hit: only a denial of a request that needed one hit (Hits 0
// or 1, the counter named once), not a shadow, a refund or a charge, since
// only then is Retry the time until any request of it could fit. A
// request the cache denies by such a counter gets the Retry of one hit and
// the Empty as they are by then, with no other traffic, and the count the
// denial saw (for a bucket the tokens its Empty takes).
//
// Two cases are not cached: sliding windows (their estimate falls as time
// passes) and shadow counters (they never deny). A refund (Envoy's
// is_negative_hits) through this replica forgets the counter; a refund
// through another replica is not seen, so this replica may deny until the
// window ends (a bucket's or log's Retry) although the refund made room.
//
// A request whose counters are all known full is denied without a store
// call. A request with other counters is denied too, and still gets their
// true state: the cache reads them from the store in one read-only call
// (each sent with no hits, so nothing is counted) and reports for each what
// the store reports for the counters of a denied request. If the read
// fails, the counters it could not read have Skipped set and Count 0.
//
// A request with a charge (Counter.Charge) always goes to the wrapped
// store, even when a counter of it is known full, that counter included:
// the store counts the charge whatever the answer, and the cache must not
// drop what was spent.
//
// An OverLimitCache is safe for concurrent use and needs no goroutine:
// entries of ended windows are never looked up again (the window start is
// part of the key), a bucket's or log's entry is ignored once its Retry
// has passed, and both are swept at most once a second.
type OverLimitCache struct {
	next      Store
	mu        sync.RWMutex
	full      map[fullKey]fullUntil
	nextSweep atomic.Int64
}

// fullKey is a counter known full: its key, window (Unix ms; 0 for
// TokenBucket and SlidingLog, whose state is not per window), limit and
// burst.
type fullKey struct {
	key   string
	size  int64
	start int64
	limit uint64
	burst uint64
}

// fullUntil is how long a counter stays known full: until (Unix ns), the
// end of its window or its Retry; the count the store reported; and for
// TokenBucket and SlidingLog when (Unix ns) the counter is empty.
type fullUntil struct {
	until   int64
	emptyAt int64
	count   uint64
}

func newFullKey(r *Counter, nowMs int64) fullKey {
	if !r.Algorithm.Windowed() {
		return fullKey{r.Key, r.Size.Milliseconds(), 0, r.Limit, r.Burst}
	}
	w := AtMillis(nowMs, r.Size.Milliseconds())
	return fullKey{r.Key, w.Size, w.Start, r.Limit, 0}
}

// NewOverLimitCache wraps a store.
func NewOverLimitCache(next Store) *OverLimitCache {
	return &OverLimitCache{next: next, full: make(map[fullKey]fullUntil)}
}

// Ping pings the wrapped store.
func (c *OverLimitCache) Ping(ctx context.Context) error { return c.next.Ping(ctx) }

// Take denies if a non-shadow fixed-window counter of reqs is known full for
// the current window, or a TokenBucket or SlidingLog counter until its
// Retry, and no request is a charge, asking the store only for
// the state of the request's other counters; otherwise it asks the wrapped
// store and remembers the counters that came back full. A charge always
// goes to the store: a counter known full still receives it.
func (c *OverLimitCache) Take(ctx context.Context, now time.Time, reqs []Counter, res []Result) (bool, error) {
	nowMs := now.UnixMilli()
	c.sweep(nowMs)
	charges := slices.ContainsFunc(reqs, func(r Counter) bool { return r.charges() })
	if !charges && c.deny(ctx, now, reqs, res) {
		return false, nil
	}
	return c.take(ctx, now, nowMs, reqs, res)
}

// take asks the wrapped store and remembers the counters that came back
// full, and forgets those that a refund gave room to.
func (c *OverLimitCache) take(ctx context.Context, now time.Time, nowMs int64, reqs []Counter, res []Result) (bool, error) {
	allowed, err := c.next.Take(ctx, now, reqs, res)
	if err != nil {
		return allowed, err
	}
	for i := range reqs {
		if r := &reqs[i]; r.Refund {
			// A refund takes hits from the current window only, the one
			// window of this counter that a lookup can ask for.
			c.mu.Lock()
			delete(c.full, newFullKey(r, nowMs))
			c.mu.Unlock()
		}
	}
	c.remember(reqs, res, nowMs)
	return allowed, nil
}

// deny answers reqs if one of its counters is known full and reports
// whether it did. The other counters are read with no hits, in one store
// call (see OverLimitCache).
func (c *OverLimitCache) deny(ctx context.Context, now time.Time, reqs []Counter, res []Result) bool {
	nowMs := now.UnixMilli()
	unread := 0
	for i := range reqs {
		r := &reqs[i]
		if f, ok := c.known(r, nowMs); ok {
			res[i] = f.result(r, nowMs)
			continue
		}
		res[i] = Result{Skipped: true}
		unread++
		if !r.Algorithm.alg().readDecides(r, reqs[:i]) {
			return false // a read with no hits does not say whether r fits
		}
	}
	if unread == len(reqs) {
		return false
	}
	if unread == 0 {
		return true
	}
	peek := make([]Counter, 0, unread)
	for i, r := range reqs {
		if res[i].Skipped {
			r.Hits, r.Refund = 0, false
			peek = append(peek, r)
		}
	}
	read := make([]Result, unread)
	_, err := c.next.Take(ctx, now, peek, read)
	var failed []int // indexes into peek
	if err != nil {
		var partial *PartialError
		if !errors.As(err, &partial) {
			return true // the unread counters stay Skipped
		}
		failed = partial.Failed
	}
	j := -1 // peek's index of reqs[i]
	for i := range reqs {
		if !res[i].Skipped {
			continue
		}
		j++
		if slices.Contains(failed, j) {
			continue
		}
		// What a store reports for the counters of a denied request: the
		// counts as they are and whether the hits fit, with those of
		// earlier counters on the same key, as the stores add them up.
		r := &reqs[i]
		pending := pendingHits(reqs[:i], r.Key, r.Size.Milliseconds())
		res[i] = r.Algorithm.alg().decideRead(r, read[j], pending, nowMs)
		c.rememberOne(r, res[i], pending, nowMs)
	}
	return true
}

// known returns what the cache knows of r's counter at nowMs, and whether
// it is cacheable and known full.
func (c *OverLimitCache) known(r *Counter, nowMs int64) (fullUntil, bool) {
	if !cacheable(r) {
		return fullUntil{}, false
	}
	c.mu.RLock()
	f, full := c.full[newFullKey(r, nowMs)]
	c.mu.RUnlock()
	if full && r.Algorithm.alg().askStore(r, f) {
		return fullUntil{}, false
	}
	return f, full && nowMs*int64(time.Millisecond) < f.until
}

// result is the Result of a denial of r by a counter known full, at nowMs.
func (f fullUntil) result(r *Counter, nowMs int64) Result {
	return r.Algorithm.alg().fullResult(r, f, nowMs)
}

// retryResult is the Result of a denial by a counter known full until its
// Retry (TokenBucket, SlidingLog), at nowMs: the Retry and Empty as they
// are by then, with no other traffic, and the count the denial saw.
func (f fullUntil) retryResult(nowMs int64) Result {
	now := nowMs * int64(time.Millisecond)
	return Result{Count: f.count, Over: true, Empty: time.Duration(max(f.emptyAt-now, 0)), Retry: time.Duration(f.until - now)}
}

// retryFull is the full answer of a counter that only frees room as time
// passes: a denial of one hit (not a charge, the counter named once) shows
// it full until its Retry.
func retryFull(r *Counter, res Result, pending uint64, nowMs int64) (fullUntil, bool) {
	if !res.Over || res.Retry <= 0 || r.Hits > 1 || pending > 0 || r.Charge {
		return fullUntil{}, false
	}
	now := nowMs * int64(time.Millisecond)
	return fullUntil{until: now + int64(res.Retry), emptyAt: now + int64(res.Empty), count: res.Count}, true
}

// remember adds the cacheable counters of reqs that res shows full.
func (c *OverLimitCache) remember(reqs []Counter, res []Result, nowMs int64) {
	for i := range reqs {
		r := &reqs[i]
		if cacheable(r) {
			c.rememberOne(r, res[i], pendingHits(reqs[:i], r.Key, r.Size.Milliseconds()), nowMs)
		}
	}
}

// rememberOne adds r's counter when res, its answer after pending hits of
// the same counter, shows it full: a window counted to its limit, or a
// TokenBucket's or SlidingLog's denial of one hit, until its Retry.
func (c *OverLimitCache) rememberOne(r *Counter, res Result, pending uint64, nowMs int64) {
	if !cacheable(r) {
		return
	}
	f, full := r.Algorithm.alg().full(r, res, pending, nowMs)
	if !full {
		return
	}
	c.mu.Lock()
	c.full[newFullKey(r, nowMs)] = f
	c.mu.Unlock()
}

func cacheable(r *Counter) bool {
	return r.Algorithm.alg().cacheable() && !r.Shadow && !r.Refund
}

func (c *OverLimitCache) sweep(nowMs int64) {
	next := c.nextSweep.Load()
	if nowMs < next || !c.nextSweep.CompareAndSwap(next, nowMs+1000) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := nowMs * int64(time.Millisecond)
	for k, f := range c.full {
		if f.until <= now {
			delete(c.full, k)
		}
	}
}
