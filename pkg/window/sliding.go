package window

import (
	"math"
	"time"
)

// slidingWindow is SlidingWindow: the counters of a fixed window, kept one
// window longer, and an estimate that weighs the previous window's count by
// the share of it a rolling window ending now still covers. It is a
// fixedWindow in what it counts (count, taken) and differs in what it
// reads and reports.
type slidingWindow struct{ fixedWindow }

func (slidingWindow) name() string        { return "sliding_window" }
func (slidingWindow) keyName() string     { return "sliding_window" }
func (slidingWindow) readsPrevious() bool { return true }

// ttl is two windows plus one second: the counter is read as the previous
// window's for one more window.
func (slidingWindow) ttl(r *Counter) time.Duration {
	return time.Duration(2*r.Size.Milliseconds()+1000) * time.Millisecond
}

func (slidingWindow) weight(_ *Counter, w Window, nowMs int64) float64 {
	return float64(w.End()-nowMs) / float64(w.Size)
}

// need is one hit for a check: a check asks whether one more would fit.
func (slidingWindow) need(r *Counter) uint64 { return max(r.Hits, 1) }

// over reports whether the estimate, previous*weight + count (with pending
// hits) + need, passes the limit. Every store computes it in this order, so
// that all decide alike to the last bit.
func (a slidingWindow) over(r *Counter, count, previous uint64, weight float64) bool {
	if r.Refund {
		return false
	}
	return float64(previous)*weight+float64(count)+float64(a.need(r)) > float64(r.Limit)
}

func (a slidingWindow) check(m *Memory, r *Counter, pending uint64, nowMs int64) Result {
	w := AtMillis(nowMs, r.Size.Milliseconds())
	cur := m.get(cellID{r.Key, w.Size, w.Start}, nowMs)
	p := w.Previous()
	prev := m.get(cellID{r.Key, p.Size, p.Start}, nowMs)
	return Result{Count: cur, Previous: prev, Over: a.over(r, cur+pending, prev, a.weight(r, w, nowMs))}
}

// undo gives back hits on the current window's counter alone: a fixed
// window's refund of it.
func (slidingWindow) undo(r *Counter) { r.Algorithm = FixedWindow }

// Its estimate falls as time passes: a full counter is not full for a time
// the cache can know.
func (slidingWindow) cacheable() bool { return false }

func (a slidingWindow) decideRead(r *Counter, read Result, pending uint64, nowMs int64) Result {
	w := AtMillis(nowMs, r.Size.Milliseconds())
	return Result{Count: read.Count, Previous: read.Previous, Over: a.over(r, read.Count+pending, read.Previous, a.weight(r, w, nowMs))}
}

func (slidingWindow) full(*Counter, Result, uint64, int64) (fullUntil, bool) {
	return fullUntil{}, false
}
func (slidingWindow) askStore(*Counter, fullUntil) bool { return true }

// used is the estimate, rounded up.
func (a slidingWindow) used(r *Counter, res Result, now time.Time) uint64 {
	w := At(now, r.Size)
	return uint64(math.Ceil(float64(res.Previous)*a.weight(r, w, now.UnixMilli()) + float64(res.Count)))
}

// reset is the time to the window's end while there is room; when full, the
// time until the estimate has fallen enough for one more hit, assuming no
// further traffic, which is at least the time to the next boundary when the
// current window alone is full.
func (slidingWindow) reset(r *Counter, res Result, now time.Time) time.Duration {
	nowMs := now.UnixMilli()
	w := At(now, r.Size)
	untilEnd := w.Until(nowMs)
	if r.Remaining(res, now) > 0 {
		return untilEnd
	}
	room := float64(r.Limit) - 1 // what the estimate must fall to
	size := float64(w.Size)
	cur, prev := float64(res.Count), float64(res.Previous)
	if room < 0 {
		return untilEnd // a zero limit never admits; say when the window turns
	}
	if cur <= room && prev > 0 {
		// Within this window: prev*(end-t)/size + cur <= room.
		t := size * (room - cur) / prev // milliseconds before the end
		wait := float64(untilEnd.Milliseconds()) - t
		return time.Duration(math.Ceil(math.Max(wait, 0))) * time.Millisecond
	}
	// Past the boundary the current count becomes the previous one:
	// cur*(1-t/size) <= room.
	t := size
	if cur > 0 {
		t = math.Ceil(size * (1 - room/cur))
	}
	return untilEnd + time.Duration(t)*time.Millisecond
}

func (slidingWindow) retryByClock() bool    { return false }
func (slidingWindow) referenceLayout() bool { return false }
