package window

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// OverLimitCache remembers fixed-window counters that are full and denies
// requests that need one of them without asking the store, until the
// window ends. It is exact for fixed windows, because a counter only grows
// within its window: once count >= limit, no hit fits until the next window.
// A key under attack therefore costs no Redis traffic.
//
// Two cases are not cached: sliding windows (their estimate falls as time
// passes) and shadow counters (they never deny). A refund (Envoy's
// is_negative_hits) through this replica forgets the counter; a refund
// through another replica is not seen, so this replica may deny until the
// window ends although the refund made room.
//
// When a cached counter denies a request, the other counters of that
// request are not read: their Results have Skipped set and Count 0.
//
// A request with a charge (Request.Charge) always goes to the wrapped
// store, even when a counter of it is known full, that counter included:
// the store counts the charge whatever the answer, and the cache must not
// drop what was spent.
//
// An OverLimitCache is safe for concurrent use and needs no goroutine:
// entries of ended windows are never looked up again (the window start is
// part of the key) and are swept at most once a second.
type OverLimitCache struct {
	next      Store
	mu        sync.RWMutex
	full      map[fullKey]struct{}
	nextSweep atomic.Int64
}

// fullKey is a counter known full: its key, window (Unix ms) and limit.
type fullKey struct {
	key   string
	size  int64
	start int64
	limit uint64
}

func newFullKey(r *Request, nowMs int64) fullKey {
	w := AtMillis(nowMs, r.Size.Milliseconds())
	return fullKey{r.Key, w.Size, w.Start, r.Limit}
}

// NewOverLimitCache wraps a store.
func NewOverLimitCache(next Store) *OverLimitCache {
	return &OverLimitCache{next: next, full: make(map[fullKey]struct{})}
}

// Ping pings the wrapped store.
func (c *OverLimitCache) Ping(ctx context.Context) error { return c.next.Ping(ctx) }

// Take denies at once if a non-shadow fixed-window counter of reqs is known
// full for the current window and no request is a charge; otherwise it asks
// the wrapped store and remembers the counters that came back full.
func (c *OverLimitCache) Take(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	nowMs := now.UnixMilli()
	c.sweep(nowMs)
	if slices.ContainsFunc(reqs, func(r Request) bool { return r.charges() }) {
		return c.take(ctx, now, nowMs, reqs, res)
	}
	for i := range reqs {
		r := &reqs[i]
		if !cacheable(r) {
			continue
		}
		c.mu.RLock()
		_, full := c.full[newFullKey(r, nowMs)]
		c.mu.RUnlock()
		if full {
			for j := range reqs {
				res[j] = Result{Skipped: true}
			}
			res[i] = Result{Count: r.Limit, Over: true}
			return false, nil
		}
	}
	return c.take(ctx, now, nowMs, reqs, res)
}

// take asks the wrapped store and remembers the counters that came back
// full, and forgets those that a refund gave room to.
func (c *OverLimitCache) take(ctx context.Context, now time.Time, nowMs int64, reqs []Request, res []Result) (bool, error) {
	allowed, err := c.next.Take(ctx, now, reqs, res)
	if err != nil {
		return allowed, err
	}
	for i := range reqs {
		r := &reqs[i]
		switch {
		case r.Refund:
			// A refund takes hits from the current window only, the one
			// window of this counter that a lookup can ask for.
			c.mu.Lock()
			delete(c.full, newFullKey(r, nowMs))
			c.mu.Unlock()
		case cacheable(r) && res[i].Count >= r.Limit:
			c.mu.Lock()
			c.full[newFullKey(r, nowMs)] = struct{}{}
			c.mu.Unlock()
		}
	}
	return allowed, nil
}

func cacheable(r *Request) bool {
	return r.Algorithm == FixedWindow && !r.Shadow && !r.Refund
}

func (c *OverLimitCache) sweep(nowMs int64) {
	next := c.nextSweep.Load()
	if nowMs < next || !c.nextSweep.CompareAndSwap(next, nowMs+1000) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.full {
		if k.start+k.size <= nowMs {
			delete(c.full, k)
		}
	}
}
