package envoyrlqs

import (
	"errors"
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Settings are the parts of a bucket's RateLimitQuotaBucketSettings that
// decide requests when no assignment is in force.
type Settings struct {
	// NoAssignment is no_assignment_behavior.fallback_rate_limit; nil means
	// unset, which Envoy treats as ALLOW_ALL. Only a blanket_rule works in
	// 1.40: the default action has no token bucket behind it.
	NoAssignment *typev3.RateLimitStrategy
	// Expired is expired_assignment_behavior.fallback_rate_limit; nil when
	// unset or when the behaviour is reuse_last_assignment (1.40 then goes
	// straight to NoAssignment when an assignment expires).
	Expired *typev3.RateLimitStrategy
	// ExpiredTimeout is expired_assignment_behavior_timeout; only its whole
	// seconds count, and 0 ends the fallback at once.
	ExpiredTimeout time.Duration
}

// ErrDefaultTokenBucket is returned by New for a token_bucket
// no_assignment_behavior, which Envoy 1.40's filter cannot apply (its
// default action has no token bucket instance).
var ErrDefaultTokenBucket = errors.New("envoyrlqs: no_assignment_behavior with a token_bucket is not applied by Envoy 1.40")

// Usage is one bucket's entry of a usage report (BucketQuotaUsage).
type Usage struct {
	Allowed, Denied uint64
	// Elapsed is the time since the previous report of the bucket,
	// truncated to whole seconds as Envoy sends it.
	Elapsed time.Duration
}

// Bucket is one Envoy's view of one RLQS bucket. Its zero value is not
// usable; call New. It is not safe for concurrent use (Envoy serializes
// these steps on its main thread).
type Bucket struct {
	settings Settings
	origin   time.Time // Envoy's monotonic clock reads (t − origin) in seconds
	started  bool

	created    bool
	subscribed *Usage // the immediate report of a new bucket, not yet taken
	allowed    uint64
	denied     uint64
	lastReport time.Time

	action     *typev3.RateLimitStrategy // the cached action's strategy; nil: the default action
	limiter    *tokenBucket              // set iff action is a token_bucket
	expiry     time.Time                 // the assignment's TTL timer; zero when none
	fallbackAt time.Time                 // the fallback's timer; zero when none

	stats Stats
}

// Stats are what tests measure about a bucket beyond Envoy's own counts.
type Stats struct {
	// Injected is the tokens the bucket gained at once rather than by
	// refill: a new token bucket starts full, and a replacing one with
	// max_tokens × the old fill ratio, which exceeds the old tokens when
	// max_tokens grows.
	Injected float64
	// Replaced counts token buckets created by assignments (new or
	// replacing); Extended counts assignments that only restarted the TTL.
	Replaced, Extended int
	// Floored is the tokens replacements lost: a replacing bucket starts
	// at the old one's fill ratio rounded down to whole tokens, so each
	// loses up to one token (more when max_tokens shrinks).
	Floored float64
}

// New returns a bucket that has seen no request yet.
func New(s Settings) (*Bucket, error) {
	if s.NoAssignment.GetTokenBucket() != nil {
		return nil, ErrDefaultTokenBucket
	}
	return &Bucket{settings: s}, nil
}

// secs is Envoy's monotonic time in float64 seconds.
func (b *Bucket) secs(t time.Time) float64 {
	if !b.started {
		b.started, b.origin = true, t
	}
	return t.Sub(b.origin).Seconds()
}

// Decide decides one request at now, counts it, and reports whether Envoy
// admits it. The first request of a bucket creates it (see Subscription).
func (b *Bucket) Decide(now time.Time) bool {
	b.advance(now)
	if !b.created {
		ok := !isDenyAll(b.settings.NoAssignment)
		b.created = true
		b.allowed, b.denied = 0, 0
		if ok {
			b.allowed = 1
		} else {
			b.denied = 1
		}
		b.lastReport = now
		u := b.take(now)
		b.subscribed = &u
		return ok
	}
	ok := b.allow(now)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

// allow is Envoy's shouldAllowRequest for a cached bucket.
func (b *Bucket) allow(now time.Time) bool {
	s := b.action
	if s == nil {
		s = b.settings.NoAssignment
		if s == nil {
			return true // the filter's default is ALLOW_ALL
		}
	}
	switch s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		return b.limiter.consume(b.secs(now))
	}
	return true
}

func isDenyAll(s *typev3.RateLimitStrategy) bool {
	_, blanket := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return blanket && s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL
}

// Subscription returns, once, the immediate report Envoy sends when a
// request creates the bucket: that request's count, Elapsed 0.
func (b *Bucket) Subscription() (Usage, bool) {
	if b.subscribed == nil {
		return Usage{}, false
	}
	u := *b.subscribed
	b.subscribed = nil
	return u, true
}

// Usage returns the bucket's entry of the periodic report at now and resets
// its counts, as Envoy does whether or not its stream is up. ok is false
// when no request has created the bucket yet (Envoy reports only buckets it
// has).
func (b *Bucket) Usage(now time.Time) (u Usage, ok bool) {
	b.advance(now)
	if !b.created {
		return Usage{}, false
	}
	return b.take(now), true
}

func (b *Bucket) take(now time.Time) Usage {
	u := Usage{Allowed: b.allowed, Denied: b.denied, Elapsed: now.Sub(b.lastReport).Truncate(time.Second)}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// Apply applies one bucket_action of a server's response received at now.
// An action for a bucket Envoy does not have is ignored, as Envoy does.
func (b *Bucket) Apply(now time.Time, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	b.advance(now)
	if !b.created {
		return
	}
	if a.GetAbandonAction() != nil {
		*b = Bucket{settings: b.settings, origin: b.origin, started: b.started, stats: b.stats}
		return
	}
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		return
	}
	s := qa.GetRateLimitStrategy()
	switch s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		b.limiter = nil
	case *typev3.RateLimitStrategy_TokenBucket:
		b.limiter = b.tokenBucketFor(now, s)
	default: // requests_per_time_unit or unset: logged and skipped
		return
	}
	b.action = s
	b.fallbackAt = time.Time{}
	b.expiry = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
}

// tokenBucketFor is the limiter Envoy keeps for the token_bucket strategy s
// at now: the running one when the cached action is an "equal" token
// bucket, else a new one at the old fill ratio (full without an old one).
func (b *Bucket) tokenBucketFor(now time.Time, s *typev3.RateLimitStrategy) *tokenBucket {
	t := b.secs(now)
	if old := b.action.GetTokenBucket(); old != nil && sameToEnvoy(old, s.GetTokenBucket()) {
		b.stats.Extended++
		return b.limiter
	}
	tb := s.GetTokenBucket()
	maxTokens := uint64(tb.GetMaxTokens())
	initial := maxTokens
	before := 0.0
	if b.limiter != nil {
		before = b.limiter.remaining(t)
		initial = uint64(float64(maxTokens) * (before / b.limiter.max))
	}
	sec := time.Duration(tb.GetFillInterval().GetSeconds())*time.Second + time.Duration(tb.GetFillInterval().GetNanos())
	whole := float64(int64(sec / time.Second)) // absl::ToInt64Seconds truncates
	rate := float64(tb.GetTokensPerFill().GetValue()) / whole
	nb := newTokenBucket(float64(maxTokens), rate, t, float64(initial))
	if gain := float64(initial) - before; gain > 0 {
		b.stats.Injected += gain
	} else {
		b.stats.Floored -= gain
	}
	b.stats.Replaced++
	return nb
}

// sameToEnvoy is Envoy 1.40's protoTokenBucketsEq: the seconds of
// fill_interval are not compared.
func sameToEnvoy(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() &&
		a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

// advance fires the timers due at or before now, each at its own time.
func (b *Bucket) advance(now time.Time) {
	for {
		switch {
		case !b.expiry.IsZero() && !b.expiry.After(now):
			at := b.expiry
			b.expiry = time.Time{}
			b.expire(at)
		case !b.fallbackAt.IsZero() && !b.fallbackAt.After(now):
			b.fallbackAt = time.Time{}
			b.action, b.limiter = nil, nil
		default:
			return
		}
	}
}

// expire is onActionExpirationTimer at at.
func (b *Bucket) expire(at time.Time) {
	fb := b.settings.Expired
	if fb == nil {
		b.action, b.limiter = nil, nil
		return
	}
	if fb.GetTokenBucket() != nil {
		b.limiter = b.tokenBucketFor(at, fb)
	} else {
		b.limiter = nil
	}
	b.action = fb
	b.fallbackAt = at.Add(time.Duration(int64(b.settings.ExpiredTimeout/time.Second)) * time.Second)
}

// Assignment returns the strategy in force at now: the server's, the
// expired fallback, or nil for no_assignment_behavior.
func (b *Bucket) Assignment(now time.Time) *typev3.RateLimitStrategy {
	b.advance(now)
	return b.action
}

// Tokens returns the tokens the bucket's token bucket holds at now, and
// false when no token bucket is in force.
func (b *Bucket) Tokens(now time.Time) (float64, bool) {
	b.advance(now)
	if b.limiter == nil {
		return 0, false
	}
	return b.limiter.remaining(b.secs(now)), true
}

// Stats returns what the bucket measured so far.
func (b *Bucket) Stats() Stats { return b.stats }

// kMinFillRate is Envoy's floor on a token bucket's rate: one token a year.
const kMinFillRate = 1.0 / (365 * 24 * 60 * 60)

// tokenBucket is Envoy's AtomicTokenBucketImpl: the bucket holds
// min(max, (now − t)·rate) tokens, and taking one moves t forward.
type tokenBucket struct {
	max, rate float64
	t         float64 // time_in_seconds_
}

func newTokenBucket(maxTokens, rate, now, initial float64) *tokenBucket {
	rate = cppMax(math.Abs(rate), kMinFillRate)
	return &tokenBucket{max: maxTokens, rate: rate, t: now - initial/rate}
}

func (tb *tokenBucket) consume(now float64) bool {
	if now <= tb.t {
		return false
	}
	total := cppMin(tb.max, (now-tb.t)*tb.rate)
	if !(total >= 1) {
		return false
	}
	tb.t = now - (total-1)/tb.rate
	return true
}

func (tb *tokenBucket) remaining(now float64) float64 {
	return cppMin(tb.max, (now-tb.t)*tb.rate)
}

// cppMin and cppMax are std::min and std::max, whose NaN handling differs
// from math.Min and math.Max.
func cppMin(a, b float64) float64 {
	if b < a {
		return b
	}
	return a
}

func cppMax(a, b float64) float64 {
	if a < b {
		return b
	}
	return a
}
