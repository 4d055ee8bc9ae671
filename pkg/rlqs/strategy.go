package rlqs

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fillInterval is the fill_interval of every token bucket Strategy sends,
// unless the rate needs a shorter one to fit tokens_per_fill in 32 bits
// (above 49,710 tokens a second): a day. Envoy 1.40 refills continuously at
// tokens_per_fill / fill_interval (in whole seconds; its token bucket takes
// rates down to one token a year), so the interval changes only the
// rounding of k = ⌊rate · F⌋: at a day a client loses less than one token a
// day to it. (At 60 s, the interval before, each client lost up to a token
// a minute: with 400 clients of a rule of 100 a second, 2% of the rule.) A
// share below one token a day is DENY_ALL. One interval for all rates also
// makes max_tokens and tokens_per_fill alone tell two assignments apart,
// which is all Envoy compares (it ignores the seconds of fill_interval).
const fillInterval = 24 * 60 * 60

// Strategy returns the rate_limit_strategy that gives a client the share
// s, given held, the strategy the client holds (nil when none):
//   - a token_bucket{max_tokens: s.Burst, tokens_per_fill: k,
//     fill_interval: F whole seconds} with k/F ≤ s's rate (rounded down,
//     never up), k ≥ 1, F = one day (fillInterval) unless k would not fit
//     32 bits;
//   - DENY_ALL when s's rate is below one token a day or its burst is 0.
//
// When the token bucket would differ from held's only in the seconds of
// fill_interval (one of a day against one of an assignment before, or a
// very fast share's shorter one), which Envoy 1.40 does not compare (it would keep the old
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
	perDay := mulDiv(s.Rate, fillInterval, PerSecond)
	if perDay == 0 {
		return 0, 0, 0, false // below one token a day
	}
	if perDay <= math.MaxUint32 {
		return maxTokens, uint32(perDay), fillInterval, true
	}
	// The longest whole-second F with ⌊rate·F⌋ ≤ 2^32 − 1 (rate ≥ 2^32
	// a day here, so F < a day).
	f = int64(mulDiv(math.MaxUint32, PerSecond, s.Rate))
	if f < 1 {
		// Over 2^32 tokens a second: the most one bucket can take.
		return maxTokens, math.MaxUint32, 1, true
	}
	return maxTokens, uint32(mulDiv(s.Rate, uint64(f), PerSecond)), f, true
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
