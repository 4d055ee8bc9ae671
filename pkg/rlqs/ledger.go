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
}

// Ledger keeps, per bucket, every client's recent demand and held share,
// shared by all replicas (Redis) or by one (memory). Key names the bucket
// as the rule's counter key does. Implementations are safe for concurrent
// use; errors wrap window.ErrStore.
type Ledger interface {
	// Assign records r at now and returns the client's share of f, valid
	// for ttl.
	//
	// There is no Leave: an Envoy whose stream ends keeps applying its
	// assignment until the assignment's TTL runs out, so a share is given
	// back only when it expires.
	Assign(ctx context.Context, now time.Time, key string, f Fleet, r Report, ttl time.Duration) (Share, error)
}
