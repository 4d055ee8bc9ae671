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
	buckets   map[stateID]int64 // a TokenBucket's theoretical arrival time, Unix ns
	logs      map[stateID]*hitLog
	nextSweep int64 // Unix ms of the next sweep of expired cells
}

// stateID names the state of a TokenBucket or SlidingLog counter: its key
// and window length, without a window start.
type stateID struct {
	key  string
	size int64
}

// hitLog is a SlidingLog's state: the times (Unix ms) of its hits, oldest
// first. A full bucket, or a log whose hits all left the window, reads the
// same as none, so neither keeps an expiry of its own: sweep frees them.
type hitLog struct {
	hits []int64
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
	return &Memory{cells: make(map[cellID]cell), buckets: make(map[stateID]int64), logs: make(map[stateID]*hitLog)}
}

// Ping always succeeds: the store is this process.
func (m *Memory) Ping(ctx context.Context) error { return nil }

// Take checks every request against its counter at now and, only if every
// non-shadow request has room, counts them all; when one has none, it
// counts only the charges (Counter.Charge). It writes one Result per
// request into res (len(res) >= len(reqs)) and reports whether the requests
// were allowed. It never fails; ctx is unused.
func (m *Memory) Take(ctx context.Context, now time.Time, reqs []Counter, res []Result) (bool, error) {
	nowMs := now.UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	if nowMs >= m.nextSweep {
		m.sweep(nowMs)
	}
	allowed := true
	for i := range reqs {
		r := &reqs[i]
		res[i] = m.check(r, reqs[:i], nowMs)
		if res[i].Over && !r.Shadow {
			allowed = false
		}
	}
	for i := range reqs {
		r := &reqs[i]
		if r.Hits == 0 || !allowed && !r.charges() {
			continue
		}
		m.count(r, &res[i], nowMs)
	}
	return allowed, nil
}

// check reads r's counter at nowMs and decides whether r fits, after the
// hits that earlier requests of the call add to the same counter.
func (m *Memory) check(r *Counter, earlier []Counter, nowMs int64) Result {
	pending := pendingHits(earlier, r.Key, r.Size.Milliseconds())
	return r.Algorithm.alg().check(m, r, pending, nowMs)
}

// count adds r's hits to its counter (or gives them back for a refund) and
// updates res to the counter's new state.
func (m *Memory) count(r *Counter, res *Result, nowMs int64) {
	r.Algorithm.alg().count(m, r, res, nowMs)
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
	// A bucket goes a second after it is full, a log a second after its
	// last hit left the window: the slack of a window's TTL (Counter.TTL),
	// for a replica whose clock is a little behind.
	grace := time.Second.Milliseconds()
	for id, tat := range m.buckets {
		if tat <= (nowMs-grace)*int64(time.Millisecond) {
			delete(m.buckets, id)
		}
	}
	for id, l := range m.logs {
		if n := len(l.hits); n == 0 || l.hits[n-1]+id.size+grace <= nowMs {
			delete(m.logs, id)
		}
	}
	m.nextSweep = nowMs + time.Second.Milliseconds()
}

// pendingHits sums the hits that earlier requests of the same call add to
// the same counter, so a request naming one descriptor twice cannot pass a
// limit that each copy alone would fit.
func pendingHits(earlier []Counter, key string, sizeMs int64) uint64 {
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
