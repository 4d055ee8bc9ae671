package window

import "time"

// MaxBucketSpan is the longest a TokenBucket's Tolerance may be, and the
// most a bucket's state may run ahead of now: 2^53 ns, about 104 days.
// Within it every store, Redis's Lua with its float64 numbers among them,
// computes the bucket with exact integers.
const MaxBucketSpan = time.Duration(1 << 53)

// Interval returns, for TokenBucket, the time one token takes to come back:
// Size / Limit rounded up to the nanosecond, so a bucket never refills
// faster than its rate; 0 when Limit is 0, which admits nothing.
func (r *Request) Interval() time.Duration {
	if r.Limit == 0 {
		return 0
	}
	size := uint64(r.Size)
	return time.Duration((size + r.Limit - 1) / r.Limit)
}

// Tolerance returns, for TokenBucket, how far its theoretical arrival time
// may run ahead of now after a hit: Burst x Interval, at most MaxBucketSpan.
func (r *Request) Tolerance() time.Duration { return time.Duration(r.bucketCost(r.burst())) }

// MaxBurst returns, for TokenBucket, the largest Burst whose Tolerance
// (Burst x Interval) is at most MaxBucketSpan; 0 when not even one token
// fits, or when Limit is 0.
func (r *Request) MaxBurst() uint64 {
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

func (r *Request) burst() uint64 {
	if r.Burst == 0 {
		return r.Limit
	}
	return r.Burst
}

// bucketCost returns hits x Interval in nanoseconds, at most MaxBucketSpan.
func (r *Request) bucketCost(hits uint64) int64 {
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
func (r *Request) bucketDecide(empty int64, pending uint64) (over bool, retry int64) {
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
func (r *Request) bucketHolds() uint64 {
	iv, tol := uint64(r.Interval()), uint64(r.Tolerance())
	return min(max(tol/iv, 1), uint64(MaxBucketSpan)-1)
}

// bucketApply returns the state (ns ahead of now) after counting r's hits on
// a bucket empty ns ahead: taken, or given back for a refund, never below
// full nor past MaxBucketSpan.
func (r *Request) bucketApply(empty int64) int64 {
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
func (r *Request) BucketResult(empty time.Duration, over bool, retry time.Duration) Result {
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

// logDecide decides r against a SlidingLog holding count hits for the
// window ending now, after pending hits of earlier requests of the same
// call on the same log. When r does not fit, need is how many of the oldest
// hits must leave the window before it would, or 0 when it never fits (its
// hits alone pass the limit).
func (r *Request) logDecide(count, pending uint64) (over bool, need uint64) {
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
func (r *Request) LogEntries(hits uint64) uint64 { return min(hits, satAdd(r.Limit, 1)) }
