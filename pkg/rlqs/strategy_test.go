package rlqs

import (
	"math"
	"math/bits"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func bucket(maxTokens, perFill uint32, interval time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(interval),
	}}}
}

func TestStrategy(t *testing.T) {
	t.Parallel()
	deny := blanket(typev3.RateLimitStrategy_DENY_ALL)
	for _, tc := range []struct {
		name string
		s    Share
		held *typev3.RateLimitStrategy
		want *typev3.RateLimitStrategy
	}{
		{"100 per second", Share{MilliRate: 100_000, Burst: 50}, nil, bucket(50, 6000, time.Minute)},
		{"rounds down", Share{MilliRate: 6568, Burst: 13}, nil, bucket(13, 394, time.Minute)}, // 394.08
		{"one a minute", Share{MilliRate: 17, Burst: 1}, nil, bucket(1, 1, time.Minute)},
		{"below one a minute", Share{MilliRate: 16, Burst: 1}, nil, deny},
		{"no burst", Share{MilliRate: 100_000}, nil, deny},
		{"zero", Share{}, nil, deny},
		// 80M/s: 4.8e9 a minute overflows 32 bits, 53 s gives 4.24e9.
		{"shorter interval for big rates", Share{MilliRate: 80_000_000_000, Burst: 1 << 40}, nil,
			bucket(math.MaxUint32, 4_240_000_000, 53*time.Second)},
		{"beyond one bucket", Share{MilliRate: math.MaxUint64, Burst: 5}, nil, bucket(5, math.MaxUint32, time.Second)},
		// Held differs only in the seconds, which Envoy does not compare.
		{"seconds-only change moves k", Share{MilliRate: 100_000, Burst: 50}, bucket(50, 6000, 30*time.Second),
			bucket(50, 5999, time.Minute)},
		{"same as held", Share{MilliRate: 100_000, Burst: 50}, bucket(50, 6000, time.Minute), bucket(50, 6000, time.Minute)},
		{"held with nanos differs anyway", Share{MilliRate: 100_000, Burst: 50}, bucket(50, 6000, 30*time.Second+1),
			bucket(50, 6000, time.Minute)},
		{"held blanket", Share{MilliRate: 100_000, Burst: 50}, deny, bucket(50, 6000, time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Strategy(tc.s, tc.held); !proto.Equal(got, tc.want) {
				t.Fatalf("Strategy(%+v, %v) = %v, want %v", tc.s, tc.held, got, tc.want)
			}
		})
	}
}

func TestStrategyMilliRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    *typev3.RateLimitStrategy
		want uint64
	}{
		{bucket(10, 6000, time.Minute), 100_000},
		{bucket(10, 3, 1500*time.Millisecond), 3000}, // whole seconds: 3/1
		{bucket(10, 3, 999*time.Millisecond), math.MaxUint64},
		{blanket(typev3.RateLimitStrategy_DENY_ALL), 0},
		{blanket(typev3.RateLimitStrategy_ALLOW_ALL), math.MaxUint64},
	} {
		if got := StrategyMilliRate(tc.s); got != tc.want {
			t.Errorf("StrategyMilliRate(%v) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

// FuzzStrategy checks the encoding's promises for any share and held
// token bucket: never more than the share, never a fill_interval Envoy
// 1.40 mishandles, and never a change Envoy would not see.
func FuzzStrategy(f *testing.F) {
	f.Add(uint64(100_000), uint64(50), uint32(50), uint32(6000), int64(30), int32(0))
	f.Add(uint64(17), uint64(1), uint32(1), uint32(1), int64(60), int32(0))
	f.Add(uint64(80_000_000_000), uint64(1<<40), uint32(0), uint32(0), int64(0), int32(0))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), uint32(math.MaxUint32), uint32(math.MaxUint32), int64(2), int32(5))
	f.Fuzz(func(t *testing.T, rate, burst uint64, hMax, hK uint32, hSec int64, hNanos int32) {
		s := Share{MilliRate: rate, Burst: burst}
		var held *typev3.RateLimitStrategy
		if hMax != 0 || hK != 0 {
			held = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens: hMax, TokensPerFill: wrapperspb.UInt32(hK), FillInterval: &durationpb.Duration{Seconds: hSec, Nanos: hNanos},
			}}}
		}
		got := Strategy(s, held)
		tb := got.GetTokenBucket()
		if tb == nil {
			if got.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
				t.Fatalf("Strategy(%+v) = %v, want a token bucket or DENY_ALL", s, got)
			}
			// DENY_ALL only below one token a minute, without a burst, or
			// when a seconds-only change left nothing else to move.
			if rate >= 17 && burst > 0 && held == nil {
				t.Fatalf("Strategy(%+v) = DENY_ALL for a share of at least a token a minute", s)
			}
			return
		}
		sec, nanos := tb.GetFillInterval().GetSeconds(), tb.GetFillInterval().GetNanos()
		k := uint64(tb.GetTokensPerFill().GetValue())
		if sec < 1 || sec > 60 || nanos != 0 || k == 0 || tb.GetMaxTokens() == 0 {
			t.Fatalf("Strategy(%+v) = %v: fill_interval must be 1..60 whole seconds, k and max_tokens ≥ 1", s, got)
		}
		if uint64(tb.GetMaxTokens()) > burst {
			t.Fatalf("Strategy(%+v) = %v: max_tokens above the burst", s, got)
		}
		// k/sec ≤ rate/1000, i.e. k·1000 ≤ rate·sec, in 128 bits.
		hi1, lo1 := bits.Mul64(k, milli)
		hi2, lo2 := bits.Mul64(rate, uint64(sec))
		if hi1 > hi2 || hi1 == hi2 && lo1 > lo2 {
			t.Fatalf("Strategy(%+v) = %v: rate above the share", s, got)
		}
		if h := held.GetTokenBucket(); h != nil && h.GetMaxTokens() == tb.GetMaxTokens() &&
			h.GetTokensPerFill().GetValue() == tb.GetTokensPerFill().GetValue() &&
			h.GetFillInterval().GetNanos() == nanos && h.GetFillInterval().GetSeconds() != sec {
			t.Fatalf("Strategy(%+v, %v) = %v: Envoy would keep the held bucket at another rate", s, held, got)
		}
	})
}
