package main

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func tokenAction(maxTokens, perFill uint32, fill, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
				TokenBucket: &typev3.TokenBucket{MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill),
					FillInterval: durationpb.New(fill)}}}}}}
}

func blanketAction(rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}}}}
}

// TestEdgeBucket steps one simulated bucket through Envoy 1.40's behaviours: each step applies an action (or
// none) at its time and then decides n requests, whose allowed count must be want.
func TestEdgeBucket(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	type step struct {
		at     time.Duration
		action *rlqspb.RateLimitQuotaResponse_BucketAction
		kind   actionKind
		n      uint64
		want   uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"no assignment allows all", []step{{0, nil, 0, 50, 50}}},
		{"new token bucket starts full", []step{{0, tokenAction(10, 5, time.Second, time.Minute), actionTokens, 50, 10}}},
		{"rate is tokens_per_fill over whole seconds", []step{
			{0, tokenAction(10, 6, 2*time.Second, time.Minute), actionTokens, 10, 10},
			{time.Second, nil, 0, 10, 3}, // 6 per 2 s
		}},
		{"sub-second fill interval allows all", []step{{0, tokenAction(1, 1, 500*time.Millisecond, time.Minute), actionTokens, 100, 100}}},
		{"same strategy only extends the TTL", []step{
			{0, tokenAction(10, 5, time.Second, 2*time.Second), actionTokens, 10, 10},
			{time.Second, tokenAction(10, 5, time.Second, 2*time.Second), actionTokens, 0, 0}, // not refilled to full
			{time.Second, nil, 0, 10, 5},
			{2500 * time.Millisecond, nil, 0, 10, 7}, // 1.5 s of refill: still assigned, the TTL was extended at 1 s
		}},
		{"seconds-only change is not a change", []step{
			{0, tokenAction(10, 5, time.Second, time.Minute), actionTokens, 10, 10},
			{0, tokenAction(10, 5, 5*time.Second, time.Minute), actionTokens, 0, 0},
			{time.Second, nil, 0, 10, 5}, // still 5 per 1 s
		}},
		{"replacement starts at the old fill ratio", []step{
			{0, tokenAction(10, 1, time.Second, time.Minute), actionTokens, 5, 5}, // half full
			{0, tokenAction(100, 1, time.Second, time.Minute), actionTokens, 100, 50},
		}},
		{"expired assignment falls back to allow all", []step{
			{0, tokenAction(1, 1, time.Second, time.Second), actionTokens, 5, 1},
			{time.Second, nil, 0, 5, 5},
		}},
		{"deny all", []step{{0, blanketAction(typev3.RateLimitStrategy_DENY_ALL, time.Minute), actionDeny, 5, 0}}},
		{"abandon forgets the assignment", []step{
			{0, blanketAction(typev3.RateLimitStrategy_DENY_ALL, time.Minute), actionDeny, 5, 0},
			{0, &rlqspb.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}, actionAbandon, 5, 5},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b edgeBucket
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				if s.action != nil {
					if got := b.Apply(now, s.action); got != s.kind {
						t.Fatalf("step %d: Apply = %v, want %v", i, got, s.kind)
					}
				}
				if got := b.Decide(now, s.n); got != s.want {
					t.Fatalf("step %d: Decide(%d) = %d, want %d", i, s.n, got, s.want)
				}
			}
		})
	}
}

func TestShares(t *testing.T) {
	even := shares(4, 0)
	for _, s := range even {
		if s != 0.25 {
			t.Fatalf("shares(4, 0) = %v", even)
		}
	}
	z := shares(3, 1) // 1, 1/2, 1/3 over 11/6
	want := []float64{6.0 / 11, 3.0 / 11, 2.0 / 11}
	for i := range z {
		if d := z[i] - want[i]; d > 1e-12 || d < -1e-12 {
			t.Fatalf("shares(3, 1) = %v, want %v", z, want)
		}
	}
}
