package window

import "time"

// slidingLog is SlidingLog: the time of every counted hit of the last
// window, one sorted log per counter keyed by the counter and its window
// length, kept until its last hit leaves the window plus one second.
type slidingLog struct{ timedState }

func (slidingLog) name() string    { return "sliding_log" }
func (slidingLog) keyName() string { return "sliding_log" }

func (slidingLog) check(m *Memory, r *Counter, pending uint64, nowMs int64) Result {
	size := r.Size.Milliseconds()
	l := m.log(stateID{r.Key, size}, nowMs)
	over, need := r.logDecide(uint64(len(l.hits)), pending)
	return l.result(size, nowMs, over, need)
}

// count adds one entry per hit, at most Limit+1 (LogEntries); a refund
// takes back the newest.
func (slidingLog) count(m *Memory, r *Counter, res *Result, nowMs int64) {
	size := r.Size.Milliseconds()
	id := stateID{r.Key, size}
	l := m.log(id, nowMs)
	n := r.LogEntries(r.Hits)
	if r.Refund {
		l.hits = l.hits[:uint64(len(l.hits))-min(uint64(len(l.hits)), n)]
	} else {
		for range n {
			l.hits = append(l.hits, nowMs)
		}
	}
	m.logs[id] = l
	over, retry := res.Over, res.Retry
	*res = l.result(size, nowMs, false, 0)
	res.Over, res.Retry = over, retry
}

// log returns the log id with the hits that left the window ending at
// nowMs trimmed; a new, unstored one when it has none.
func (m *Memory) log(id stateID, nowMs int64) *hitLog {
	l, ok := m.logs[id]
	if !ok {
		return &hitLog{}
	}
	old := 0
	for old < len(l.hits) && l.hits[old] <= nowMs-id.size {
		old++
	}
	l.hits = l.hits[old:]
	return l
}

// result is the Result of a log of window size ms at nowMs: when over, the
// request would fit once its need oldest hits left, or never (need 0).
func (l *hitLog) result(size, nowMs int64, over bool, need uint64) Result {
	res := Result{Count: uint64(len(l.hits)), Over: over}
	if n := len(l.hits); n > 0 {
		res.Empty = time.Duration(l.hits[n-1]+size-nowMs) * time.Millisecond
	}
	switch {
	case !over:
	case need == 0:
		res.Retry = res.Empty
	default:
		res.Retry = time.Duration(l.hits[need-1]+size-nowMs) * time.Millisecond
	}
	return res
}

// taken is the entries hits add: a log holds at most Limit+1 of a request.
func (slidingLog) taken(r *Counter, hits uint64) uint64 { return r.LogEntries(hits) }

// undo takes back the entries the hits added.
func (slidingLog) undo(r *Counter) { r.Hits = r.LogEntries(r.Hits) }

// readDecides: a read with no hits says when one more hit would fit, not
// when more would.
func (slidingLog) readDecides(r *Counter, earlier []Counter) bool {
	return satAdd(pendingHits(earlier, r.Key, r.Size.Milliseconds()), max(r.Hits, 1)) <= 1
}

// decideRead is the read itself: it needed one hit, as the read (see
// readDecides).
func (slidingLog) decideRead(_ *Counter, read Result, _ uint64, _ int64) Result { return read }

func (slidingLog) fullResult(_ *Counter, f fullUntil, nowMs int64) Result {
	return f.retryResult(nowMs)
}

func (slidingLog) capacity(limit, _ uint64) uint64 { return limit }

// failClosed reports an unknown log full until the current window (of its
// length, aligned as the windows are) ends: its oldest hit is somewhere in
// the last window, and that end is a time within one window, as any full
// log's retry is.
func (slidingLog) failClosed(r *Counter, now time.Time) (reset, wait time.Duration) {
	return windowEnd(r, now)
}

func (slidingLog) takesBurst() bool { return false }

// logDecide decides r against a SlidingLog holding count hits for the
// window ending now, after pending hits of earlier requests of the same
// call on the same log. When r does not fit, need is how many of the oldest
// hits must leave the window before it would, or 0 when it never fits (its
// hits alone pass the limit).
func (r *Counter) logDecide(count, pending uint64) (over bool, need uint64) {
	if r.Refund {
		return false, 0
	}
	want := satAdd(pending, r.need())
	if want > r.Limit {
		return true, 0
	}
	if count > r.Limit-want {
		return true, count - (r.Limit - want)
	}
	return false, 0
}

// LogEntries returns how many entries a SlidingLog adds for hits: one per
// hit, but at most Limit+1. A group of Limit+1 entries at one time keeps
// every window holding it over the limit, as the hits themselves would, so
// every decision is the same while a charge far over the limit costs
// memory in proportion to the limit, not to its hits.
func (r *Counter) LogEntries(hits uint64) uint64 { return min(hits, satAdd(r.Limit, 1)) }
