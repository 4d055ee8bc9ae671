package rlqs

import "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"

// Observer is told what the server sees and does, for metrics.
// Implementations must be safe for concurrent use and fast: they run once
// per usage of every report.
type Observer interface {
	// Usage is called once per accepted usage and limit it matched, with
	// Envoy's reported counts: l is nil for a bucket that matches no limit.
	// domain is the stream's, or "unknown" when no rules name it.
	Usage(domain string, l *rules.Limit, allowed, denied uint64)
	// Assignment is called once per bucket_action sent.
	Assignment(domain string, k Kind)
	// Refused is called once per refused usage or stream.
	Refused(r Refusal)
	// Streams and Buckets are called with +1 and -1 as streams start and
	// end, and as buckets join a stream and leave it (abandoned, or with
	// their stream).
	Streams(delta int)
	Buckets(delta int)
}

// Kind is what a bucket_action says.
type Kind uint8

// Kinds, as metric label values by String.
const (
	KindAllowAll Kind = iota
	KindDenyAll
	KindTokenBucket
	KindAbandon
	numKinds
)

func (k Kind) String() string {
	return [...]string{"allow_all", "deny_all", "token_bucket", "abandon"}[k]
}

// Refusal is why a usage or a stream was refused.
type Refusal uint8

// Refusals, as metric label values by String.
const (
	// RefusedNoDomain: the first report has no domain; the stream ends
	// with InvalidArgument.
	RefusedNoDomain Refusal = iota
	// RefusedDomainChanged: a later report names another domain; the
	// stream ends with InvalidArgument.
	RefusedDomainChanged
	// RefusedEmptyBucket: a usage without bucket_id entries.
	RefusedEmptyBucket
	// RefusedBadBucket: more entries than UsageLimits.MaxEntries, or a key
	// or value longer than MaxEntryBytes.
	RefusedBadBucket
	// RefusedBadElapsed: time_elapsed negative, malformed, or longer than
	// UsageLimits.MaxElapsed.
	RefusedBadElapsed
	// RefusedAbsurdCounts: allowed + denied beyond UsageLimits.MaxRate
	// over the elapsed time.
	RefusedAbsurdCounts
	// RefusedDuplicate: the bucket's second usage in one report.
	RefusedDuplicate
	// RefusedMaxBuckets: a new bucket on a stream that has MaxBuckets.
	RefusedMaxBuckets
	// RefusedMaxStreams: a stream beyond MaxStreams; it ends with
	// ResourceExhausted.
	RefusedMaxStreams
	numRefusals
)

func (r Refusal) String() string {
	return [...]string{"no_domain", "domain_changed", "empty_bucket", "bad_bucket", "bad_elapsed", "absurd_counts",
		"duplicate_bucket", "max_buckets", "max_streams"}[r]
}

type nopObserver struct{}

func (nopObserver) Usage(string, *rules.Limit, uint64, uint64) {}
func (nopObserver) Assignment(string, Kind)                    {}
func (nopObserver) Refused(Refusal)                            {}
func (nopObserver) Streams(int)                                {}
func (nopObserver) Buckets(int)                                {}
