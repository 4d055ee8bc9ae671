package rlqs

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fillInterval is the fill_interval of every token bucket Strategy sends
// for a share of at least one token a minute, unless the rate needs a
// shorter one to fit tokens_per_fill in 32 bits. Envoy 1.40 refills
// continuously at tokens_per_fill / fill_interval (in whole seconds), so the
// interval changes only the rounding: at 60 s a client loses less than one
// token a minute to it. One interval for all rates also makes max_tokens
// and tokens_per_fill alone tell two assignments apart, which is all Envoy
// compares (it ignores the seconds of fill_interval).
const fillInterval = 60

// slowFillInterval is the fill_interval of a share below one token a
// minute (a rule of a few an hour or a day, or a small part of one): a
// day, so such a share loses less than one token a day to rounding, and a
// share below one token a day is DENY_ALL. It is one interval for all slow
// shares, for the same reason as fillInterval; Envoy's token bucket takes
// rates down to one token a year, far below it. A day is the cap: a rule
// slower than that (a week's window) still admits while a client's share
// is at least one a day.
const slowFillInterval = 24 * 60 * 60

// Strategy returns the rate_limit_strategy that gives a client the share
// s, given held, the strategy the client holds (nil when none):
//   - a token_bucket{max_tokens: s.Burst, tokens_per_fill: k,
//     fill_interval: F whole seconds} with k/F ≤ s's rate (rounded down,
//     never up), k ≥ 1, F = 60 s unless k would not fit 32 bits, and
//     F = one day (slowFillInterval) for a share below one token a minute;
//   - DENY_ALL when s's rate is below one token a day or its burst is 0.
//
// When the token bucket would differ from held's only in the seconds of
// fill_interval, which Envoy 1.40 does not compare (it would keep the old
// bucket), k is lowered by one so Envoy sees the change. The result never
// has a sub-second fill_interval or nanos, which 1.40 turns into "admit
// everything". It never returns ALLOW_ALL.
func Strategy(s Share, held *typev3.RateLimitStrategy) *typev3.RateLimitStrategy {
	maxTokens, k, f, ok := tokenBucket(s)
	if !ok {
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	h := held.GetTokenBucket()
	if h != nil && h.GetMaxTokens() == maxTokens && h.GetTokensPerFill().GetValue() == k &&
		h.GetFillInterval().GetNanos() == 0 && h.GetFillInterval().GetSeconds() == f {
		// The same again (most reports): held itself, which no one
		// changes once sent, rather than three new messages a usage.
		return held
	}
	if h != nil && h.GetMaxTokens() == maxTokens &&
		h.GetTokensPerFill().GetValue() == k && h.GetFillInterval().GetNanos() == 0 &&
		h.GetFillInterval().GetSeconds() != f {
		if k > 1 {
			k--
		} else if maxTokens > 1 {
			maxTokens--
		} else {
			return blanket(typev3.RateLimitStrategy_DENY_ALL)
		}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     maxTokens,
		TokensPerFill: wrapperspb.UInt32(k),
		FillInterval:  durationpb.New(time.Duration(f) * time.Second),
	}}}
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// tokenBucket encodes s: ok is false when s is DENY_ALL.
func tokenBucket(s Share) (maxTokens, k uint32, f int64, ok bool) {
	if s.Burst == 0 {
		return 0, 0, 0, false
	}
	maxTokens = uint32(min(s.Burst, math.MaxUint32))
	if mulDiv(s.Rate, fillInterval, PerSecond) == 0 {
		// Below one token a minute, so below 1440 a day: k fits 32 bits.
		if k := mulDiv(s.Rate, slowFillInterval, PerSecond); k > 0 {
			return maxTokens, uint32(k), slowFillInterval, true
		}
		return 0, 0, 0, false
	}
	for f = fillInterval; f >= 1; f-- {
		if k := mulDiv(s.Rate, uint64(f), PerSecond); k <= math.MaxUint32 {
			return maxTokens, uint32(k), f, true
		}
	}
	// Over 2^32 tokens a second: the most one bucket can take.
	return maxTokens, math.MaxUint32, 1, true
}

// StrategyRate is the rate, in the unit of PerSecond,
// that Envoy 1.40 applies for s: tokens_per_fill / whole seconds of
// fill_interval, rounded down; 0 for DENY_ALL; math.MaxUint64 for a rate
// Envoy does not bound (ALLOW_ALL, a sub-second fill_interval).
func StrategyRate(s *typev3.RateLimitStrategy) uint64 {
	if tb := s.GetTokenBucket(); tb != nil {
		// absl::ToInt64Seconds(seconds + nanos) truncates toward zero.
		sec, nanos := tb.GetFillInterval().GetSeconds(), tb.GetFillInterval().GetNanos()
		if sec > 0 && nanos < 0 {
			sec--
		}
		if sec <= 0 {
			return math.MaxUint64
		}
		return uint64(tb.GetTokensPerFill().GetValue()) * PerSecond / uint64(sec)
	}
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return 0
	}
	return math.MaxUint64
}
