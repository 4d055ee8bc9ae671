package rules

import (
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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

// Limit is one compiled rate limit of a descriptor node. Its configuration
// is immutable once compiled, and limits are shared by concurrent requests;
// the one thing that changes is Denial, a cache swapped atomically. Use it
// by pointer.
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
	// Denial holds the 429 parts a server last built for this limit's
	// denials, for the next denial at the same retry-after to share.
	// Loading leaves it empty; package rules never reads it.
	Denial atomic.Pointer[Denial]

	pb    *rlsv3.RateLimitResponse_RateLimit // current_limit, built at load
	path  []step                             // the nodes that lead to the limit, root first; nil for overrides
	index int                                // the limit's place in its descriptor's rate_limits
}

// Capacity returns the most hits the limit's counter holds: Burst for a
// TokenBucket limit, RequestsPerUnit for the others and for a
// requests_per_unit of 0, which admits nothing whatever the burst.
func (l *Limit) Capacity() uint64 {
	return l.Algorithm.Capacity(uint64(l.RequestsPerUnit), uint64(l.Burst))
}

// Index returns the limit's place (from 0) in its descriptor's
// rate_limits: 0 for a descriptor's single rate_limit and for an override.
func (l *Limit) Index() int { return l.index }

// Denial is the body and headers that Envoy sends with an HTTP 429 for one
// limit's denial with one retry-after. It is shared by every response that
// carries it: nothing may modify it once it is stored in Limit.Denial.
type Denial struct {
	RetryAfter int64 // whole seconds, at least 1
	Body       []byte
	Headers    []*corev3.HeaderValue
}

// envoyUnits maps window units to the response's unit enum. The numbers
// differ: window.Unit has Week (5) between Day and Month, while the response
// enum, which gained WEEK last, has MONTH 5, YEAR 6 and WEEK 7. (Envoy's
// RateLimitUnit, of request overrides, has no WEEK.)
var envoyUnits = map[window.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	window.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	window.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	window.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	window.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	window.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	window.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	window.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// Proto returns the limit as Envoy's current_limit. Loaded limits build it
// once and share it with every response, so callers must not modify it;
// other limits (overrides) get a new one per call.
func (l *Limit) Proto() *rlsv3.RateLimitResponse_RateLimit {
	if l.pb != nil {
		return l.pb
	}
	pb := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            envoyUnits[l.Unit],
	}
	if l.Multiplier > 1 {
		pb.UnitMultiplier = wrapperspb.UInt32(l.Multiplier)
	}
	return pb
}
