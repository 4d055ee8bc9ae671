package envoyrls

import (
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// Observer receives decisions and store calls. Implementations must be safe
// for concurrent use and fast: they run on the request path.
type Observer interface {
	// Decision is called once per limit whose counter the store answered,
	// with its outcome, and once per limit whose counter the store failed
	// for, with OutcomeFailureMode. It is not called for unlimited limits,
	// for limits whose counter was skipped (not read: another counter of
	// the request was known full), for the answered limits of a request
	// that gets Unavailable, or for invalid requests.
	Decision(d Decision)
	// StoreCall is called once per store call with its latency and error,
	// but for a call that failed after its caller went away (its context
	// ended: Envoy reset the call or its deadline passed), which says
	// nothing about the store.
	StoreCall(d time.Duration, err error)
	// InvalidRequest is called once per request refused as malformed
	// (ErrInvalidRequest), before anything is counted.
	InvalidRequest()
	// Admission is called with each event of the cap on concurrent calls
	// (Options.MaxConcurrent); never without a cap.
	Admission(a Admission)
}

// Decision is what an Observer is told of one limit's decision. Its
// references belong to the request and the rules: an Observer must not
// modify them, nor keep Entries.
type Decision struct {
	// Domain is the request's domain, or "unknown" when no rules name it.
	Domain string
	Limit  *rules.Limit
	// Value carries request values only for rules that ask for them: with
	// Limit.DetailedMetric, the descriptor's last value (the pattern, for
	// a share_threshold wildcard); else with Limit.ValueToMetric, the whole
	// label Limit.AppendMetricRule builds; else "".
	Value string
	// Entries are the entries of the descriptor that matched Limit.
	Entries []*rlv3.RateLimitDescriptor_Entry
	Outcome Outcome
	// Hits is what the descriptor asked to add (its hits_addend, else the
	// request's, 1 when unset), whether or not they were counted; 0 for a
	// refund (is_negative_hits), which adds none.
	Hits uint64
	// Refunded is what a refund (is_negative_hits) asked to give back; 0
	// for any other decision. The counter gives back at most what it
	// holds.
	Refunded uint64
	// Used is the counter's use before this request, as limit_remaining
	// counts it (window.Counter.Used: for a sliding window the estimate,
	// for a token bucket the tokens taken from a full bucket, for a
	// sliding log the hits of the window); 0 with OutcomeFailureMode, when
	// it is unknown. Used+Hits is the use the request asked for: more than
	// Limit.Capacity() is over it.
	Used uint64
	// NearLimit is the use above which an allowed decision is near its
	// limit: Limit.Capacity() (the limit, or a token bucket's burst) times
	// Options.NearLimitRatio, rounded down.
	NearLimit uint64
}

// Outcome is what a decision meant for one limit.
type Outcome uint8

// Outcomes, as metric label values by String.
const (
	OutcomeOK Outcome = iota
	// OutcomeOverLimit: no room; also for a quota-mode limit, whose
	// request may still be allowed, as envoyproxy/ratelimit's over_limit
	// stat counts it.
	OutcomeOverLimit
	OutcomeNearLimit // allowed, with more than NearLimitRatio of the limit used
	// OutcomeShadowOverLimit: no room, but the limit is in shadow mode
	// (its rule's shadow_mode, or Options.ShadowMode).
	OutcomeShadowOverLimit
	OutcomeFailureMode // the store failed and the limit's failure mode answered
)

func (o Outcome) String() string {
	return [...]string{"ok", "over_limit", "near_limit", "shadow_over_limit", "failure_mode"}[o]
}
