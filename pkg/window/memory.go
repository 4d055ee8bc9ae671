package window

import (
	"context"
	"sync"
	"time"
)

// Memory is a Store that keeps counters in this process. It has the same
// semantics as Redis (window math, atomic check-and-count over all counters
// of a request, counters that expire their window plus one second after
// their first hit, two windows for a sliding one) but its counters are not
// shared: use it for a single replica or for tests.
//
// The zero Memory is not usable; call NewMemory. A Memory is safe for
// concurrent use. Expired counters are freed by Take itself at most once a
// second, so it needs no goroutine of its own.
type Memory struct {
	mu        sync.Mutex
	cells     map[cellID]cell
	nextSweep int64 // Unix ms of the next sweep of expired cells
}

type cellID struct {
	key   string
	size  int64
	start int64
}

type cell struct {
	count   uint64
	expires int64 // Unix ms
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{cells: make(map[cellID]cell)}
}

// Ping always succeeds: the store is this process.
func (m *Memory) Ping(ctx context.Context) error { return nil }

// Take checks every request against its counter at now and, only if every
// non-shadow request has room, counts them all; when one has none, it
// counts only the charges (Request.Charge). It writes one Result per
// request into res (len(res) >= len(reqs)) and reports whether the requests
// were allowed. It never fails; ctx is unused.
func (m *Memory) Take(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	nowMs := now.UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	if nowMs >= m.nextSweep {
		m.sweep(nowMs)
	}
	allowed := true
	for i := range reqs {
		r := &reqs[i]
		w := AtMillis(nowMs, r.Size.Milliseconds())
		cur := m.get(cellID{r.Key, w.Size, w.Start}, nowMs)
		pending := pendingHits(reqs[:i], r.Key, w.Size)
		var prev uint64
		if r.Algorithm == SlidingWindow {
			p := w.Previous()
			prev = m.get(cellID{r.Key, p.Size, p.Start}, nowMs)
		}
		over := r.over(cur+pending, prev, r.Weight(w, nowMs))
		res[i] = Result{Count: cur, Previous: prev, Over: over}
		if over && !r.Shadow {
			allowed = false
		}
	}
	for i := range reqs {
		r := &reqs[i]
		if r.Hits == 0 || !allowed && !r.charges() {
			continue
		}
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
		res[i].Count = c.count
	}
	return allowed, nil
}

func (m *Memory) get(id cellID, nowMs int64) uint64 {
	c, ok := m.cells[id]
	if !ok || c.expires <= nowMs {
		return 0
	}
	return c.count
}

func (m *Memory) sweep(nowMs int64) {
	for id, c := range m.cells {
		if c.expires <= nowMs {
			delete(m.cells, id)
		}
	}
	m.nextSweep = nowMs + time.Second.Milliseconds()
}

// pendingHits sums the hits that earlier requests of the same call add to
// the same counter, so a request naming one descriptor twice cannot pass a
// limit that each copy alone would fit.
func pendingHits(earlier []Request, key string, sizeMs int64) uint64 {
	var sum uint64
	for i := range earlier {
		e := &earlier[i]
		if !e.Refund && e.Key == key && e.Size.Milliseconds() == sizeMs {
			sum = satAdd(sum, e.Hits)
		}
	}
	return sum
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}
