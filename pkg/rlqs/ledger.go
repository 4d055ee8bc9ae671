package rlqs

import (
	"context"
	"time"
)

// Fleet is the rate one bucket's rule allows the whole fleet, as the
// ledger divides it: Tokens per Period, with at most Burst at once.
type Fleet struct {
	// Tokens admitted per Period across every client; 0 admits none.
	Tokens uint64
	// Period is the rule's window (unit × unit_multiplier); > 0.
	Period time.Duration
	// Burst is the most the fleet's buckets may hold at once, in tokens;
	// >= 1 when Tokens > 0.
	Burst uint64
}

// Report is one client's usage of one bucket, taken from one
// BucketQuotaUsage after sanity checks.
type Report struct {
	// Client names one Envoy's stream for this bucket; unique across
	// replicas and reconnections (a reconnecting Envoy is a new client, and
	// its old share lapses with its TTL).
	Client string
	// Allowed and Denied are the requests the client decided over Elapsed.
	Allowed, Denied uint64
	// Elapsed is the time the usage covers (Envoy 1.40 sends whole
	// seconds). 0 means no interval: the immediate report of a new bucket,
	// or a re-check the server makes at Share.Recheck with no counts; the
	// ledger then keeps the client's last demand estimate.
	Elapsed time.Duration
}

// Share is the part of a Fleet a ledger grants one client until Expires:
// a Rate (in the unit of PerSecond, so a share of a few tokens a day
// survives) and a bucket of at most Burst tokens. A ledger never grants shares whose sum,
// over clients whose Expires is after now, exceeds the Fleet's rate or
// burst; docs/rlqs.md gives the precise invariant and its error terms.
type Share struct {
	Rate    uint64 // thousandths of a token per day: PerSecond is one a second
	Burst   uint64
	Expires time.Time
	// Changed reports whether the share differs from the one the client
	// holds, so the server sends a new strategy (else only a longer TTL).
	Changed bool
	// Recheck, when not zero, is when the ledger expects room for a larger
	// share: the client got less than its target because other clients'
	// decreases may still be in flight. A server that calls Assign again
	// then, with a Report of no counts and Elapsed 0, and sends the result,
	// gives the client its share without waiting for its next report.
	Recheck time.Time
	// Kept reports that a Quiet request was answered without a write: the
	// share is the one the client holds, unchanged, and Expires is when
	// the assignment Envoy holds lapses (at least the request's Hold
	// away). The caller sends nothing, so that assignment stands.
	Kept bool
}

// Request is one client's report of one bucket to a Ledger: Key names the
// bucket as the rule's counter key does, Fleet is what the bucket's rule
// allows, and the share granted is valid for TTL.
type Request struct {
	Key    string
	Fleet  Fleet
	Report Report
	TTL    time.Duration
	// Quiet says the caller sends the share only if it changed, and the
	// client holds its last one (a stream's re-check or report of a bucket
	// it sent an assignment): a ledger may then leave a share that is
	// unchanged, and whose assignment in Envoy holds at least Hold past
	// now, unwritten, answering it Kept with the Expires it already had.
	// Nothing goes to Envoy, so its assignment still lapses no later than
	// the ledger counts it; the report's counts are then not recorded
	// (the demand it measures is within the hysteresis of the last one).
	Quiet bool
	// Hold is, for a Quiet request, the least time past now the kept
	// assignment must still hold: a report's, the time until the client's
	// next report has been answered, so the next one writes before the
	// assignment lapses; 0 for a re-check.
	Hold time.Duration
}

// Result is a Ledger's answer to one Request: the client's Share, or Err
// (wrapping window.ErrStore), which concerns that Request alone.
type Result struct {
	Share Share
	Err   error
}

// Ledger keeps, per bucket, every client's recent demand and held share,
// shared by all replicas (Redis) or by one (memory). Implementations are
// safe for concurrent use.
type Ledger interface {
	// Assign records each request's report at now and returns, in the
	// requests' order, each client's share of its request's Fleet. The
	// requests of one call are one client's report (a stream's report or
	// re-check), so a ledger may serve them together (the Redis ledger in
	// one pipelined round trip); a request's failure does not fail the
	// others. Requests of one Key are served in their order, as if by
	// separate calls.
	//
	// There is no Leave: an Envoy whose stream ends keeps applying its
	// assignment until the assignment's TTL runs out, so a share is given
	// back only when it expires.
	Assign(ctx context.Context, now time.Time, reqs []Request) []Result
}

// AssignOne asks l for one client's share of one bucket: a call of
// l.Assign with the one request.
func AssignOne(ctx context.Context, l Ledger, now time.Time, key string, f Fleet, r Report, ttl time.Duration) (Share, error) {
	res := l.Assign(ctx, now, []Request{{Key: key, Fleet: f, Report: r, TTL: ttl}})
	return res[0].Share, res[0].Err
}
