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
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name string
		s    Share
		held *typev3.RateLimitStrategy
		want *typev3.RateLimitStrategy
	}{
		{"100 per second", Share{Rate: 100 * PerSecond, Burst: 50}, nil, bucket(50, 8_640_000, day)},
		{"rounds down", Share{Rate: 6568 * PerSecond / 1000, Burst: 13}, nil, bucket(13, 567475, day)}, // 567475.2
		{"one a minute", Share{Rate: PerSecond / 60, Burst: 1}, nil, bucket(1, 1440, day)},
		{"just below one a minute", Share{Rate: PerSecond/60 - 1, Burst: 2}, nil, bucket(2, 1439, day)},
		{"5 an hour", Share{Rate: 5 * PerSecond / 3600, Burst: 2}, nil, bucket(2, 120, day)},
		{"half of 5 an hour", Share{Rate: 5 * PerSecond / 7200, Burst: 2}, nil, bucket(2, 60, day)},
		{"3 a day", Share{Rate: 3 * PerSecond / 86400, Burst: 2}, nil, bucket(2, 3, day)},
		{"one a day", Share{Rate: PerSecond / 86400, Burst: 2}, nil, bucket(2, 1, day)},
		{"below one a day", Share{Rate: PerSecond/86400 - 1, Burst: 2}, nil, deny},
		{"no burst", Share{Rate: 100 * PerSecond}, nil, deny},
		{"zero", Share{}, nil, deny},
		// 49,710/s is 4,294,944,000 a day, within 32 bits; 49,711/s is
		// not: the longest interval that fits is 86,398 s.
		{"the most a day's interval takes", Share{Rate: 49_710 * PerSecond, Burst: 1}, nil, bucket(1, 4_294_944_000, day)},
		{"just beyond a day's interval", Share{Rate: 49_711 * PerSecond, Burst: 1}, nil,
			bucket(1, 49_711*86_398, 86_398*time.Second)},
		// 80M/s: 53 s gives 4.24e9.
		{"shorter interval for big rates", Share{Rate: 80_000_000 * PerSecond, Burst: 1 << 40}, nil,
			bucket(math.MaxUint32, 4_240_000_000, 53*time.Second)},
		{"beyond one bucket", Share{Rate: math.MaxUint64, Burst: 5}, nil, bucket(5, math.MaxUint32, time.Second)},
		// Held differs only in the seconds, which Envoy does not compare
		// (a minute was the interval of an earlier build).
		{"seconds-only change from a minute to a day", Share{Rate: 5 * PerSecond / 3600, Burst: 2}, bucket(2, 120, time.Minute),
			bucket(2, 119, day)},
		{"seconds-only change moves k", Share{Rate: 100 * PerSecond, Burst: 50}, bucket(50, 8_640_000, 30*time.Second),
			bucket(50, 8_639_999, day)},
		{"seconds-only change, k of one: max_tokens moves", Share{Rate: PerSecond / 86400, Burst: 2}, bucket(2, 1, time.Minute),
			bucket(1, 1, day)},
		{"seconds-only change, nothing left to move", Share{Rate: PerSecond / 86400, Burst: 1}, bucket(1, 1, time.Minute), deny},
		{"same as held", Share{Rate: 100 * PerSecond, Burst: 50}, bucket(50, 8_640_000, day), bucket(50, 8_640_000, day)},
		{"held with nanos differs anyway", Share{Rate: 100 * PerSecond, Burst: 50}, bucket(50, 8_640_000, 30*time.Second+1),
			bucket(50, 8_640_000, day)},
		{"held blanket", Share{Rate: 100 * PerSecond, Burst: 50}, deny, bucket(50, 8_640_000, day)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Strategy(tc.s, tc.held); !proto.Equal(got, tc.want) {
				t.Fatalf("Strategy(%+v, %v) = %v, want %v", tc.s, tc.held, got, tc.want)
			}
		})
	}
}

func TestStrategyRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    *typev3.RateLimitStrategy
		want uint64
	}{
		{bucket(10, 6000, time.Minute), 100 * PerSecond},
		{bucket(10, 3, 1500*time.Millisecond), 3 * PerSecond}, // whole seconds: 3/1
		{bucket(2, 120, 24*time.Hour), 5 * PerSecond / 3600},
		{bucket(10, 3, 999*time.Millisecond), math.MaxUint64},
		{blanket(typev3.RateLimitStrategy_DENY_ALL), 0},
		{blanket(typev3.RateLimitStrategy_ALLOW_ALL), math.MaxUint64},
	} {
		if got := StrategyRate(tc.s); got != tc.want {
			t.Errorf("StrategyRate(%v) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

// FuzzStrategy checks the encoding's promises for any share and held
// token bucket: never more than the share, never a fill_interval Envoy
// 1.40 mishandles, and never a change Envoy would not see.
func FuzzStrategy(f *testing.F) {
	f.Add(100*PerSecond, uint64(50), uint32(50), uint32(6000), int64(30), int32(0))
	f.Add(PerSecond/60, uint64(1), uint32(1), uint32(1), int64(60), int32(0))
	f.Add(5*PerSecond/3600, uint64(2), uint32(2), uint32(120), int64(60), int32(0))
	f.Add(3*PerSecond/86400, uint64(2), uint32(0), uint32(0), int64(0), int32(0))
	f.Add(80_000_000*PerSecond, uint64(1<<40), uint32(0), uint32(0), int64(0), int32(0))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64), uint32(math.MaxUint32), uint32(math.MaxUint32), int64(2), int32(5))
	f.Fuzz(func(t *testing.T, rate, burst uint64, hMax, hK uint32, hSec int64, hNanos int32) {
		s := Share{Rate: rate, Burst: burst}
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
			// DENY_ALL only below one token a day, without a burst, or
			// when a seconds-only change left nothing else to move.
			if hi, lo := bits.Mul64(rate, 24*60*60); (hi > 0 || lo >= PerSecond) && burst > 0 && held == nil {
				t.Fatalf("Strategy(%+v) = DENY_ALL for a share of at least a token a day", s)
			}
			return
		}
		sec, nanos := tb.GetFillInterval().GetSeconds(), tb.GetFillInterval().GetNanos()
		k := uint64(tb.GetTokensPerFill().GetValue())
		if sec < 1 || sec > 24*60*60 || nanos != 0 || k == 0 || tb.GetMaxTokens() == 0 {
			t.Fatalf("Strategy(%+v) = %v: fill_interval must be 1 s to a day in whole seconds, k and max_tokens ≥ 1", s, got)
		}
		// Less than a day only when a day's k would not fit 32 bits:
		// rate·86400 ≥ 2^32·PerSecond.
		if hi, lo := bits.Mul64(rate, 24*60*60); sec != 24*60*60 && hi == 0 && lo/PerSecond <= math.MaxUint32 {
			t.Fatalf("Strategy(%+v) = %v: shorter than a day though a day's k fits 32 bits", s, got)
		}
		if uint64(tb.GetMaxTokens()) > burst {
			t.Fatalf("Strategy(%+v) = %v: max_tokens above the burst", s, got)
		}
		// k/sec ≤ rate/PerSecond, i.e. k·PerSecond ≤ rate·sec, in 128 bits.
		hi1, lo1 := bits.Mul64(k, PerSecond)
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

// The same token bucket again is the held message itself: a report that
// changes nothing builds no new strategy.
func TestStrategySameAgainIsHeld(t *testing.T) {
	s := Share{Rate: 5 * PerSecond, Burst: 10}
	held := Strategy(s, nil)
	if got := Strategy(s, held); got != held {
		t.Fatalf("Strategy(%+v, held) = %v, a new message; want held", s, got)
	}
	if got := Strategy(Share{Rate: 4 * PerSecond, Burst: 10}, held); got == held || proto.Equal(got, held) {
		t.Fatalf("a lower share = %v, want a new strategy", got)
	}
}
