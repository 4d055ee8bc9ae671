package rules

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// FailureMode says what a limit answers when the store fails. The zero
// FailureMode is unset and inherits from the enclosing descriptor or domain;
// a domain that sets none uses FailError.
type FailureMode uint8

const (
	failUnset FailureMode = iota
	// FailError returns gRPC Unavailable, so Envoy's failure_mode_deny
	// decides: by default Envoy lets the request through.
	FailError
	// FailAllow answers OK for the descriptor.
	FailAllow
	// FailDeny answers OVER_LIMIT for the descriptor, with retry-after.
	FailDeny
)

// String returns the mode as written in rules: "error", "allow", "deny".
func (m FailureMode) String() string {
	switch m {
	case FailAllow:
		return "allow"
	case FailDeny:
		return "deny"
	case FailError:
		return "error"
	}
	return ""
}

func parseFailureMode(s string) (FailureMode, bool) {
	switch strings.ToLower(s) {
	case "allow":
		return FailAllow, true
	case "deny":
		return FailDeny, true
	case "error":
		return FailError, true
	}
	return failUnset, false
}

// OverLimit says what a limit does with hits that do not fit: count them
// anyway or refuse them. The zero OverLimit is unset and inherits from the
// enclosing descriptor or domain (a descriptor with quota_mode and no
// over_limit of its own charges); a domain that sets none charges.
type OverLimit uint8

const (
	overLimitUnset OverLimit = iota
	// OverLimitCharge counts the hits of a request that states its cost (a
	// hits_addend on the descriptor or the request) whether or not they fit:
	// the cost was already spent, as the tokens of a response that Envoy
	// reports when the stream is done. The counter may pass the limit; the
	// answer is then OVER_LIMIT. A request that states no cost (one hit,
	// Envoy's default) is counted only when it fits, so a client hammering
	// a full counter never pushes it further.
	OverLimitCharge
	// OverLimitRefuse counts nothing of a request that does not fit: it is
	// denied and consumes no quota, whatever its cost.
	OverLimitRefuse
)

// String returns the setting as written in rules: "charge" or "refuse".
func (o OverLimit) String() string {
	switch o {
	case OverLimitCharge:
		return "charge"
	case OverLimitRefuse:
		return "refuse"
	}
	return ""
}

func parseOverLimit(s string) (OverLimit, bool) {
	switch strings.ToLower(s) {
	case "charge":
		return OverLimitCharge, true
	case "refuse":
		return OverLimitRefuse, true
	}
	return overLimitUnset, false
}

// parseAlgorithm is window.ParseAlgorithm in any case, as rules write
// names.
func parseAlgorithm(s string) (window.Algorithm, bool) {
	return window.ParseAlgorithm(strings.ToLower(s))
}

// MaxSlidingLogLimit is the largest requests_per_unit a sliding_log limit
// may have. A sliding log keeps one entry per hit of its window in each
// counter, so a counter's memory and the store's time per call grow with
// the limit; beyond this, sliding_window or token_bucket bound the same
// rate in constant memory. docs/algorithms.md gives the measurements of
// memory per entry and of a call's time in Redis it was chosen from.
const MaxSlidingLogLimit = 1000

// Limit is one compiled rate limit of a descriptor node. It is immutable
// once compiled and shared by concurrent requests. Use it by pointer.
type Limit struct {
	Name            string // rate_limit.name; "" when unnamed
	RequestsPerUnit uint32
	Unit            window.Unit
	Multiplier      uint32        // unit_multiplier, >= 1
	Size            time.Duration // Unit x Multiplier
	Unlimited       bool
	Shadow          bool
	Replaces        []string
	Algorithm       window.Algorithm
	// Burst is, for a TokenBucket limit, the most hits its full bucket
	// admits at once: the rule's burst, else RequestsPerUnit. 0 for other
	// algorithms and unlimited limits.
	Burst       uint32
	FailureMode FailureMode // resolved: never unset
	// OverLimit is what the limit does with a stated cost that does not
	// fit; resolved: never unset.
	OverLimit OverLimit
	// DetailedMetric asks for the descriptor's last value (for a
	// share_threshold wildcard, its pattern) in the metric label, after
	// Rule. It takes precedence over ValueToMetric.
	DetailedMetric bool
	// ValueToMetric reports that the metric label carries request values,
	// as envoyproxy/ratelimit's value_to_metric makes it: some descriptor
	// on the limit's path set value_to_metric where it changes the label
	// (on a key-only node, or a wildcard without share_threshold). The
	// label is then AppendMetricRule's, not Rule. Never set together with
	// DetailedMetric.
	ValueToMetric bool
	// QuotaMode is the descriptor's quota_mode: when over its limit, the
	// descriptor is reported but never makes the request OVER_LIMIT, as in
	// envoyproxy/ratelimit. Package rules only carries it; the server
	// applies it.
	QuotaMode bool
	// Metadata is the descriptor's metadata, built once at load for a
	// response's dynamic_metadata; nil when the descriptor has none. It is
	// shared by every response and by the descriptor's limits: callers
	// must not modify it.
	Metadata *structpb.Struct
	// Rule names the limit in metrics and logs: its name, else the path of
	// descriptor keys (and values as written) that leads to it, such as
	// "api_key.path" or "user_bot*", with "[i]" after the path of the i-th
	// (from 0) of a descriptor's rate_limits when i > 0.
	Rule string
	// Path is where the limit sits in its domain as envoyproxy/ratelimit's
	// stats keys name it, less the domain: the descriptor keys and values
	// as written ("key_value.key2"), with "[i]" after it for the i-th (from
	// 0) of a descriptor's rate_limits when i > 0. It is Rule for a limit
	// without a name; "" for an override.
	Path string

	// Override marks Envoy's per-request limit override, which a server
	// builds per request and keys apart from configured limits. Loaded
	// limits never have it.
	Override bool

	path  []step // the nodes that lead to the limit, root first; nil for overrides
	index int    // the limit's place in its descriptor's rate_limits
	id    int    // the limit's place in its Set's Limits
}

// Capacity returns the most hits the limit's counter holds: Burst for a
// TokenBucket limit, RequestsPerUnit for the others and for a
// requests_per_unit of 0, which admits nothing whatever the burst.
func (l *Limit) Capacity() uint64 {
	if l.Algorithm == window.TokenBucket && l.RequestsPerUnit > 0 {
		return uint64(l.Burst)
	}
	return uint64(l.RequestsPerUnit)
}

// Index returns the limit's place (from 0) in its descriptor's
// rate_limits: 0 for a descriptor's single rate_limit and for an override.
func (l *Limit) Index() int { return l.index }

// ID returns the limit's place (from 0) in Set.Limits of the Set that
// compiled it, so a server can keep what it prepares per limit in a table
// beside the Set instead of on the shared Limit. It is 0 for an override,
// which belongs to no Set: check Override first.
func (l *Limit) ID() int { return l.id }
