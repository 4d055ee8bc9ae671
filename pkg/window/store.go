package window

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrStore wraps every failure of a store to answer (network, timeout,
// script errors). The request's counters are then in an unknown state for
// Redis and untouched for Memory.
var ErrStore = errors.New("window: store")

// Store checks and counts the counters of one rate-limit request
// atomically: Memory and Redis are stores, and OverLimitCache and Breaker
// wrap one.
type Store interface {
	Take(ctx context.Context, now time.Time, reqs []Counter, res []Result) (bool, error)
	Ping(ctx context.Context) error
}

var (
	_ Store = (*Memory)(nil)
	_ Store = (*OverLimitCache)(nil)
	_ Store = (*Breaker)(nil)
)

// PartialError is the error of a Take of which some counters were answered
// and others not, on Redis Cluster when the nodes of some slots fail. It
// wraps ErrStore and the first underlying error.
//
// Failed lists the indexes (into the reqs given to Take) of the counters
// that are in an unknown state; their Results are meaningless. The
// Results of every other counter are valid, and Take's allowed reports
// whether all of those non-shadow counters had room. When allowed is true
// the answered counters have been counted, as if the failed ones had
// allowed; when it is false only the answered charges (Counter.Charge) were
// counted.
//
// A server applies each failed request's failure mode and decides. If it
// then denies a request that Take allowed (a failed counter fails closed),
// the answered counters hold hits of a denied request; to give them back,
// call Take again with the same now and the answered requests that had
// Hits > 0 and neither Refund nor Charge, each with Refund set (a charge
// stays counted: it was spent whatever the answer).
type PartialError struct {
	// Failed holds counter indexes in increasing order.
	Failed []int
	// Err is the first failure; it wraps ErrStore.
	Err error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("window: %d request(s) failed: %v", len(e.Failed), e.Err)
}

// Unwrap returns Err, so errors.Is(err, ErrStore) holds.
func (e *PartialError) Unwrap() error { return e.Err }

// Counter asks a store to check and count hits on one counter.
type Counter struct {
	// Key identifies one limit's counters of a descriptor (see
	// AppendKeyHead and AppendKeyCounter); the store appends the window.
	Key string
	// Limit is the number of hits a window admits. 0 admits none.
	Limit uint64
	// Size is the window length; whole milliseconds, at most MaxSize.
	Size time.Duration
	// Hits is what this request adds. 0 checks without counting: the
	// request is then over the limit when the counter is past its limit, for
	// FixedWindow (as envoyproxy/ratelimit decides, so a budget spent to
	// exactly its limit still admits a check), and when not even one more
	// hit would fit, for the other algorithms.
	Hits uint64
	// Refund gives Hits back instead of taking them (Envoy's
	// is_negative_hits). A refund is never over the limit and never lowers a
	// counter below zero.
	Refund bool
	// Shadow counters are checked and counted but never deny the request.
	Shadow bool
	// Charge counts Hits even when the request is denied, whether by this
	// counter or another: they were already spent (the tokens of a
	// response, reported when its stream is done), so the counter may pass
	// Limit. Over still reports whether they fit. Without Charge a counter
	// is counted only when the whole request is allowed. Charge means
	// nothing for a Refund or zero Hits.
	Charge bool
	// Algorithm picks how the counter counts.
	Algorithm Algorithm
	// Burst is, for TokenBucket, the most hits the full bucket admits at
	// once; 0 means Limit. Other algorithms ignore it.
	Burst uint64
	// Reference marks a FixedWindow counter kept as envoyproxy/ratelimit
	// keeps it, so that both servers count in it during a migration: Key
	// is AppendReferenceKey's, to which the store appends the window's
	// start in Unix seconds, and the store counts as envoyproxy/ratelimit
	// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: a denied request
	// still adds its hits to this counter when they do not fit it;
	// every decision that reaches Redis sets the counter's TTL (EXPIRE) to
	// TTL. Only a Redis store honours the last two.
	Reference bool
	// Jitter is added to a Reference counter's TTL, as
	// envoyproxy/ratelimit adds a random part of up to
	// EXPIRATION_JITTER_MAX_SECONDS; whole seconds, >= 0. Ignored otherwise.
	Jitter time.Duration
}

// Result is a store's answer for one Counter.
type Result struct {
	// Count is the current window's counter after the decision: raised by
	// Hits when the request was allowed or the counter a charge, unchanged
	// otherwise. For SlidingLog it is the hits the log holds for the window
	// ending now; for TokenBucket the tokens taken from a full bucket,
	// ceil(Empty / Interval), which passes Burst after a charge that did
	// not fit.
	Count uint64
	// Previous is the previous window's counter, read for SlidingWindow
	// only.
	Previous uint64
	// Over reports that this counter had no room for the request's hits
	// (for Shadow requests too).
	Over bool
	// Skipped reports that the counter was not read: another counter of the
	// request was known to be full and reading the others failed (see
	// OverLimitCache); Count is then unknown and 0.
	Skipped bool
	// Empty is, for TokenBucket and SlidingLog, the time from now until the
	// counter is back to its start with no further hits: the bucket full,
	// the log empty. 0 for the windows, whose Reset says it.
	Empty time.Duration
	// Retry is, for TokenBucket and SlidingLog when Over, the time from now
	// until the request's hits would fit with no other traffic: exact, as
	// these counters only free room as time passes. When the hits can never
	// fit (more than Burst or Limit) it is Empty. 0 otherwise.
	Retry time.Duration
}

// TTL is how long a store keeps a counter of r after its first hit: its
// window plus one second, so a counter outlives its window even if the
// clocks of replicas and Redis disagree slightly, and for SlidingWindow one
// more window, in which it is read as the previous one. It is whole
// milliseconds, and a store never extends it. A SlidingLog's counter lives
// as long after its last hit; a TokenBucket's after its last hit as long as
// the bucket takes to fill, plus one second (see bucketTTL in bucket.go).
//
// A Reference counter's TTL is its window plus Jitter, envoyproxy/ratelimit's
// EXPIRE, which every decision sets again.
func (r *Counter) TTL() time.Duration {
	if r.Reference {
		return r.Size + r.Jitter
	}
	return r.Algorithm.alg().ttl(r)
}

// Weight returns the share of the previous window that a rolling window
// ending at nowMs still covers, for SlidingWindow; 0 otherwise. w is r's
// window at nowMs (AtMillis(nowMs, r.Size.Milliseconds())). Every store
// computes a sliding counter's estimate as
// float64(previous)*Weight + float64(current), in that order, so that all
// stores decide alike to the last bit.
func (r *Counter) Weight(w Window, nowMs int64) float64 {
	return r.Algorithm.alg().weight(r, w, nowMs)
}

// charges reports whether r counts its hits even when denied.
func (r *Counter) charges() bool { return r.Charge && r.Hits > 0 && !r.Refund }

// need is the room a request must find: its hits, or when it only checks
// one, except for FixedWindow, which envoyproxy/ratelimit finds over only
// past its limit.
func (r *Counter) need() uint64 { return r.Algorithm.alg().need(r) }

// Used returns how much of the counter res holds: Count, and for
// SlidingWindow the rounded-up estimate.
func (r *Counter) Used(res Result, now time.Time) uint64 { return r.Algorithm.alg().used(r, res, now) }

// Capacity returns the most hits the counter holds: Limit, or for
// TokenBucket the burst; 0 when Limit is 0, which admits nothing whatever
// the burst.
func (r *Counter) Capacity() uint64 { return r.Algorithm.Capacity(r.Limit, r.Burst) }

// Remaining returns how many hits the counter still admits after res:
// Capacity less Used, never negative. For a TokenBucket that is the whole
// tokens left.
func (r *Counter) Remaining(res Result, now time.Time) uint64 {
	used, c := r.Used(res, now), r.Capacity()
	if used >= c {
		return 0
	}
	return c - used
}

// RetryAfter returns how long a client denied by this counter should wait:
// Reset for the windows, Retry for TokenBucket and SlidingLog.
func (r *Counter) RetryAfter(res Result, now time.Time) time.Duration {
	return r.Algorithm.alg().retryAfter(r, res, now)
}

// Reset returns the time until the counter admits again. For FixedWindow it
// is the time to the end of the current window. For SlidingWindow with room
// left it is also the time to the window's end; when it is full it is the
// time until the estimate has fallen enough for one more hit, assuming no
// further traffic, which is at least the time to the next boundary when the
// current window alone is full. For TokenBucket and SlidingLog it is Empty:
// the time until the bucket is full, or the log empty.
func (r *Counter) Reset(res Result, now time.Time) time.Duration {
	return r.Algorithm.alg().reset(r, res, now)
}

// FailClosed returns the reset and the retry-after wait to report for r's
// counter when the store failed for it and its failure mode denies. Its
// state is unknown, so it is reported just full: a window until it ends; a
// token bucket just emptied, full again after its Tolerance and admitting
// a hit after one Interval, as a bucket that has just denied one; a
// sliding log until the current window (of its length, aligned as the
// windows are) ends.
func (r *Counter) FailClosed(now time.Time) (reset, wait time.Duration) {
	return r.Algorithm.alg().failClosed(r, now)
}

// Taken returns how much of Used hits counted by r account for: the hits,
// or for SlidingLog the entries they add (LogEntries).
func (r *Counter) Taken(hits uint64) uint64 { return r.Algorithm.alg().taken(r, hits) }

// Undo returns the refund that gives back what r, counted, added to its
// counter's current state: on a SlidingWindow the current window's counter
// alone (a FixedWindow refund of it), on a SlidingLog the entries its hits
// added (LogEntries).
func (r Counter) Undo() Counter {
	r.Refund = true
	r.Algorithm.alg().undo(&r)
	return r
}
