package window

import "time"

// tokenBucket is TokenBucket: one theoretical arrival time per counter,
// keyed by the counter and its window length, kept until the bucket is
// full again plus one second.
type tokenBucket struct{ timedState }

func (tokenBucket) name() string    { return "token_bucket" }
func (tokenBucket) keyName() string { return "token_bucket" }

func (tokenBucket) check(m *Memory, r *Counter, pending uint64, nowMs int64) Result {
	empty := m.bucketEmpty(stateID{r.Key, r.Size.Milliseconds()}, nowMs)
	over, retry := r.bucketDecide(empty, pending)
	return r.BucketResult(time.Duration(empty), over, time.Duration(retry))
}

func (tokenBucket) count(m *Memory, r *Counter, res *Result, nowMs int64) {
	id := stateID{r.Key, r.Size.Milliseconds()}
	empty := r.bucketApply(m.bucketEmpty(id, nowMs))
	m.buckets[id] = nowMs*int64(time.Millisecond) + empty
	*res = r.BucketResult(time.Duration(empty), res.Over, res.Retry)
}

// bucketEmpty returns how far (ns) the bucket id's state runs ahead of
// nowMs: 0 when it is full or missing.
func (m *Memory) bucketEmpty(id stateID, nowMs int64) int64 {
	return max(m.buckets[id]-nowMs*int64(time.Millisecond), 0)
}

func (tokenBucket) taken(_ *Counter, hits uint64) uint64 { return hits }
func (tokenBucket) undo(*Counter)                        {}

func (tokenBucket) readDecides(*Counter, []Counter) bool { return true }

// decideRead decides from the read's Empty, which says when any number of
// tokens comes back.
func (tokenBucket) decideRead(r *Counter, read Result, pending uint64, _ int64) Result {
	over, retry := r.bucketDecide(int64(read.Empty), pending)
	return r.BucketResult(read.Empty, over, time.Duration(retry))
}

// fullResult counts the tokens the Empty left by then takes.
func (tokenBucket) fullResult(r *Counter, f fullUntil, nowMs int64) Result {
	res := f.retryResult(nowMs)
	if iv := r.Interval(); iv > 0 {
		res.Count = uint64((res.Empty + iv - 1) / iv)
	}
	return res
}

// capacity is the burst: 0 when limit is 0, which admits nothing.
func (tokenBucket) capacity(limit, burst uint64) uint64 {
	if limit == 0 || burst == 0 {
		return limit
	}
	return burst
}

// failClosed reports an unknown bucket just emptied: full again after its
// Tolerance and admitting a hit after one Interval, as a bucket that has
// just denied one; a zero limit, which never admits, as a window.
func (tokenBucket) failClosed(r *Counter, now time.Time) (reset, wait time.Duration) {
	if r.Limit > 0 {
		return r.Tolerance(), r.Interval()
	}
	return windowEnd(r, now)
}

func (tokenBucket) takesBurst() bool { return true }

// MaxBucketSpan is the longest a TokenBucket's Tolerance may be, and the
// most a bucket's state may run ahead of now: 2^53 ns, about 104 days.
// Within it every store, Redis's Lua with its float64 numbers among them,
// computes the bucket with exact integers.
const MaxBucketSpan = time.Duration(1 << 53)

// Interval returns, for TokenBucket, the time one token takes to come back:
// Size / Limit rounded up to the nanosecond, so a bucket never refills
// faster than its rate; 0 when Limit is 0, which admits nothing.
func (r *Counter) Interval() time.Duration {
	if r.Limit == 0 {
		return 0
	}
	size := uint64(r.Size)
	return time.Duration((size + r.Limit - 1) / r.Limit)
}

// Tolerance returns, for TokenBucket, how far its theoretical arrival time
// may run ahead of now after a hit: Burst x Interval, at most MaxBucketSpan.
func (r *Counter) Tolerance() time.Duration { return time.Duration(r.bucketCost(r.burst())) }

// MaxBurst returns, for TokenBucket, the largest Burst whose Tolerance
// (Burst x Interval) is at most MaxBucketSpan; 0 when not even one token
// fits, or when Limit is 0.
func (r *Counter) MaxBurst() uint64 {
	iv := uint64(r.Interval())
	if iv == 0 {
		return 0
	}
	return uint64(MaxBucketSpan) / iv
}

// bucketTTL returns how long a store keeps a TokenBucket's state after a
// write that leaves it empty ahead of now: until the bucket is full again,
// rounded up to the millisecond, plus one second, like a window's TTL.
func bucketTTL(empty time.Duration) time.Duration {
	return (empty+time.Millisecond-1)/time.Millisecond*time.Millisecond + time.Second
}

func (r *Counter) burst() uint64 {
	if r.Burst == 0 {
		return r.Limit
	}
	return r.Burst
}

// bucketCost returns hits x Interval in nanoseconds, at most MaxBucketSpan.
func (r *Counter) bucketCost(hits uint64) int64 {
	iv := uint64(r.Interval())
	if iv != 0 && hits > uint64(MaxBucketSpan)/iv {
		return int64(MaxBucketSpan)
	}
	return int64(hits * iv)
}

// bucketDecide decides r against a bucket whose state runs empty ns ahead
// of now (0: full), after pending hits of earlier requests of the same call
// on the same bucket. It returns whether r's hits (one when it only checks)
// do not fit, and if so the time until they would. Refunds always fit.
func (r *Counter) bucketDecide(empty int64, pending uint64) (over bool, retry int64) {
	if r.Refund {
		return false, 0
	}
	if r.Limit == 0 {
		return true, empty
	}
	want, tol := satAdd(pending, r.need()), int64(r.Tolerance())
	if want > r.bucketHolds() {
		return true, empty // more than the bucket holds: never fits
	}
	if after := empty + r.bucketCost(want); after > tol {
		return true, after - tol
	}
	return false, 0
}

// bucketHolds returns the most hits one request may take from a full
// bucket: the whole Intervals in its Tolerance (Burst, unless the
// Tolerance is capped at MaxBucketSpan), at least one, and below 2^53,
// which Lua's numbers hold exactly. Deciding by it rather than by a cost
// capped at MaxBucketSpan keeps a request of more hits than that from
// fitting when the Tolerance is MaxBucketSpan itself.
func (r *Counter) bucketHolds() uint64 {
	iv, tol := uint64(r.Interval()), uint64(r.Tolerance())
	return min(max(tol/iv, 1), uint64(MaxBucketSpan)-1)
}

// bucketApply returns the state (ns ahead of now) after counting r's hits on
// a bucket empty ns ahead: taken, or given back for a refund, never below
// full nor past MaxBucketSpan.
func (r *Counter) bucketApply(empty int64) int64 {
	cost := r.bucketCost(r.Hits)
	if r.Refund {
		return max(empty-cost, 0)
	}
	return min(empty+cost, int64(MaxBucketSpan))
}

// BucketResult returns the Result of r's TokenBucket left empty ahead of
// now (0: full), whether r was over and, if so, the time until its hits
// would fit: Count is the tokens taken, empty (>= 0) rounded up to whole
// Intervals (0 when Limit is 0), and Retry is 0 unless over. Every store
// makes a bucket's Result with it.
func (r *Counter) BucketResult(empty time.Duration, over bool, retry time.Duration) Result {
	res := Result{Over: over, Empty: empty}
	if iv := r.Interval(); iv > 0 {
		res.Count = uint64(empty / iv)
		if empty%iv != 0 { // rounded up without overflow, whatever a reply says
			res.Count++
		}
	}
	if over {
		res.Retry = retry
	}
	return res
}
