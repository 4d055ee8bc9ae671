package window

import "time"

// fixedWindow is FixedWindow: one integer counter per epoch-aligned window,
// keyed by the window's start, kept its window plus one second.
type fixedWindow struct{}

func (fixedWindow) name() string        { return "fixed_window" }
func (fixedWindow) keyName() string     { return "" } // the default: a descriptor's one limit keys as the descriptor
func (fixedWindow) windowed() bool      { return true }
func (fixedWindow) readsPrevious() bool { return false }

func (fixedWindow) ttl(r *Counter) time.Duration {
	return time.Duration(r.Size.Milliseconds()+1000) * time.Millisecond
}

func (fixedWindow) weight(*Counter, Window, int64) float64 { return 0 }

// need is the hits alone: a check is over only past the limit, as
// envoyproxy/ratelimit finds it, so a budget spent to exactly its limit
// still admits a check.
func (fixedWindow) need(r *Counter) uint64 { return r.Hits }

// over reports whether count (with pending hits) leaves no room for r.
func (fixedWindow) over(r *Counter, count uint64) bool {
	if r.Refund {
		return false
	}
	return count > r.Limit || r.Hits > r.Limit-count
}

func (a fixedWindow) check(m *Memory, r *Counter, pending uint64, nowMs int64) Result {
	w := AtMillis(nowMs, r.Size.Milliseconds())
	cur := m.get(cellID{r.Key, w.Size, w.Start}, nowMs)
	return Result{Count: cur, Over: a.over(r, cur+pending)}
}

// count adds to the current window's counter, which expires r.TTL after
// its first hit; a refund never takes it below zero.
func (fixedWindow) count(m *Memory, r *Counter, res *Result, nowMs int64) {
	w := AtMillis(nowMs, r.Size.Milliseconds())
	id := cellID{r.Key, w.Size, w.Start}
	c, ok := m.cells[id]
	if !ok || c.expires <= nowMs {
		c = cell{expires: nowMs + r.TTL().Milliseconds()}
	}
	if r.Refund {
		c.count -= min(c.count, r.Hits)
	} else {
		c.count = satAdd(c.count, r.Hits)
	}
	m.cells[id] = c
	res.Count = c.count
}

func (fixedWindow) taken(_ *Counter, hits uint64) uint64 { return hits }
func (fixedWindow) undo(*Counter)                        {}

// A fixed window's counter only grows within its window: once it holds the
// limit, no hit fits until the window ends.
func (fixedWindow) cacheable() bool                      { return true }
func (fixedWindow) readDecides(*Counter, []Counter) bool { return true }

func (a fixedWindow) decideRead(r *Counter, read Result, pending uint64, _ int64) Result {
	return Result{Count: read.Count, Over: a.over(r, read.Count+pending)}
}

func (fixedWindow) full(r *Counter, res Result, _ uint64, nowMs int64) (fullUntil, bool) {
	return windowFull(r, res, nowMs)
}

// askStore: a check fits a window at its limit, so only a count seen past
// it answers a check here.
func (fixedWindow) askStore(r *Counter, f fullUntil) bool { return r.Hits == 0 && f.count <= r.Limit }

func (fixedWindow) fullResult(r *Counter, _ fullUntil, _ int64) Result {
	return Result{Count: r.Limit, Over: true}
}

func (fixedWindow) capacity(limit, _ uint64) uint64 { return limit }

func (fixedWindow) used(_ *Counter, res Result, _ time.Time) uint64 { return res.Count }

// reset is the time to the end of the current window.
func (fixedWindow) reset(r *Counter, _ Result, now time.Time) time.Duration {
	return At(now, r.Size).Until(now.UnixMilli())
}

func (fixedWindow) retryAfter(r *Counter, res Result, now time.Time) time.Duration {
	return r.Reset(res, now)
}

// failClosed reports an unknown counter just full, until its window ends.
func (fixedWindow) failClosed(r *Counter, now time.Time) (reset, wait time.Duration) {
	return windowEnd(r, now)
}

func (fixedWindow) takesBurst() bool      { return false }
func (fixedWindow) retryByClock() bool    { return true }
func (fixedWindow) referenceLayout() bool { return true }

// windowEnd is the time from now to the end of r's window, aligned as the
// windows are, twice: the fail-closed answer of every algorithm that has
// nothing better to say.
func windowEnd(r *Counter, now time.Time) (reset, wait time.Duration) {
	end := At(now, r.Size).Until(now.UnixMilli())
	return end, end
}

// windowFull is the full answer of a windowed counter: counted to its
// limit, it is full until its window ends.
func windowFull(r *Counter, res Result, nowMs int64) (fullUntil, bool) {
	if res.Count < r.Limit {
		return fullUntil{}, false
	}
	return fullUntil{count: res.Count, until: AtMillis(nowMs, r.Size.Milliseconds()).End() * int64(time.Millisecond)}, true
}
