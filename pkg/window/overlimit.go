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
// therefore costs no Redis traffic.
//
// Two cases are not cached: sliding windows (their estimate falls as time
// passes) and shadow counters (they never deny). A refund (Envoy's
// is_negative_hits) through this replica forgets the counter; a refund
// through another replica is not seen, so this replica may deny until the
// window ends although the refund made room.
//
// A request whose counters are all known full is denied without a store
// call. A request with other counters is denied too, and still gets their
// true state: the cache reads them from the store in one read-only call
// (each sent with no hits, so nothing is counted) and reports for each what
// the store reports for the counters of a denied request. If the read
// fails, the counters it could not read have Skipped set and Count 0.
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

// Take denies if a non-shadow fixed-window counter of reqs is known full for
// the current window and no request is a charge, asking the store only for
// the state of the request's other counters; otherwise it asks the wrapped
// store and remembers the counters that came back full. A charge always
// goes to the store: a counter known full still receives it.
func (c *OverLimitCache) Take(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	nowMs := now.UnixMilli()
	c.sweep(nowMs)
	charges := slices.ContainsFunc(reqs, func(r Request) bool { return r.charges() })
	if !charges && c.deny(ctx, now, reqs, res) {
		return false, nil
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
func (c *OverLimitCache) deny(ctx context.Context, now time.Time, reqs []Request, res []Result) bool {
	nowMs := now.UnixMilli()
	unread := 0
	for i := range reqs {
		if c.isFull(&reqs[i], nowMs) {
			res[i] = Result{Count: reqs[i].Limit, Over: true}
		} else {
			res[i] = Result{Skipped: true}
			unread++
		}
	}
	if unread == len(reqs) {
		return false
	}
	if unread == 0 {
		return true
	}
	peek := make([]Request, 0, unread)
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
		r, got := &reqs[i], read[j]
		w := AtMillis(nowMs, r.Size.Milliseconds())
		pending := pendingHits(reqs[:i], r.Key, w.Size)
		res[i] = Result{Count: got.Count, Previous: got.Previous, Over: r.over(got.Count+pending, got.Previous, r.Weight(w, nowMs))}
		c.remember(reqs[i:i+1], res[i:i+1], nowMs)
	}
	return true
}

// isFull reports whether r's counter is cacheable and known full at nowMs.
func (c *OverLimitCache) isFull(r *Request, nowMs int64) bool {
	if !cacheable(r) {
		return false
	}
	c.mu.RLock()
	_, full := c.full[newFullKey(r, nowMs)]
	c.mu.RUnlock()
	return full
}

// remember adds the cacheable counters of reqs that res shows full.
func (c *OverLimitCache) remember(reqs []Request, res []Result, nowMs int64) {
	for i := range reqs {
		if r := &reqs[i]; cacheable(r) && res[i].Count >= r.Limit {
			c.mu.Lock()
			c.full[newFullKey(r, nowMs)] = struct{}{}
			c.mu.Unlock()
		}
	}
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
