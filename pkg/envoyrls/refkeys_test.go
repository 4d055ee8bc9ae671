package envoyrls

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// referenceRules mix limits envoyproxy/ratelimit can express with some it
// cannot.
const referenceRules = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: team
    value: a_b
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: wide
    value: "*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: multiplied
    rate_limit: {unit: second, unit_multiplier: 60, requests_per_unit: 3}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: hour, requests_per_unit: 30}
`

// TestReferenceKeysLayout: with ReferenceKeys, the limits
// envoyproxy/ratelimit can express count in its keys (prefix, domain, '_'
// joined entries, window start in seconds) with a TTL of the unit plus less
// than the jitter; the others keep this project's keys. Each admits
// exactly its limit.
func TestReferenceKeysLayout(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	f := newFixture(t, redisstore.New(client, redisstore.Options{}), referenceRules, func(o *Options) {
		o.ReferenceKeys = &ReferenceKeys{Prefix: "ref:", JitterMax: 10 * time.Second}
	})
	sec := func(size int64) string { return strconv.FormatInt(t0.Unix()/size*size, 10) }
	ms := func(size int64) string { return strconv.FormatInt(window.AtMillis(t0.UnixMilli(), size).Start, 10) }
	tests := []struct {
		name string
		d    *rlv3.RateLimitDescriptor
		keys []string
		ttl  time.Duration // the unit: the reference layout's TTL less its jitter; 0 for this project's keys
	}{
		{"one unit", desc("api_key", "alice"), []string{"ref:edge_api_key_alice_" + sec(60)}, time.Minute},
		{"value with '_'", desc("team", "a_b"), []string{"ref:edge_team_a_b_" + sec(3600)}, time.Hour},
		{"share_threshold keys the pattern", desc("wide", "anything"), []string{"ref:edge_wide_*_" + sec(60)}, time.Minute},
		{"unit_multiplier keeps ours", desc("multiplied", "x"), []string{"ratelimit:{edge|multiplied=x}:60000:" + ms(60_000)}, 0},
		{"sliding window keeps ours", desc("sliding", "x"), []string{"ratelimit:{edge|sliding=x}!sliding_window:60000:" + ms(60_000)}, 0},
		{"first limit in reference keys, second in ours", desc("two", "x"),
			[]string{"ref:edge_two_x_" + sec(60), "ratelimit:{edge|two=x}!1:3600000:" + ms(3_600_000)}, time.Minute},
		{"an override keys as the configured limit", &rlv3.RateLimitDescriptor{Entries: entries("api_key", "bob"),
			Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}},
			[]string{"ref:edge_api_key_bob_" + sec(60)}, time.Minute},
	}
	ctx := context.Background()
	for _, tc := range tests {
		var codes []rlsv3.RateLimitResponse_Code
		for range 4 {
			codes = append(codes, f.call(t, "edge", tc.d).OverallCode)
		}
		if want := []rlsv3.RateLimitResponse_Code{okCode, okCode, okCode, overCode}; !slices.Equal(codes, want) {
			t.Errorf("%s: codes %v, want %v", tc.name, codes, want)
		}
		for i, k := range tc.keys {
			v, err := client.Get(ctx, k).Int()
			if err != nil || v < 3 {
				t.Errorf("%s: GET %s = %d, %v, want >= 3", tc.name, k, v, err)
			}
			if i > 0 || tc.ttl == 0 {
				continue
			}
			if ttl := client.TTL(ctx, k).Val(); ttl < tc.ttl || ttl >= tc.ttl+10*time.Second {
				t.Errorf("%s: TTL %s = %v, want in [%v, %v)", tc.name, k, ttl, tc.ttl, tc.ttl+10*time.Second)
			}
		}
	}
	if n := client.DBSize(ctx).Val(); n != 8 {
		keys, _ := client.Keys(ctx, "*").Result()
		t.Errorf("DBSIZE = %d, want 8, one per counter (the sliding window's previous one was never written): %q", n, keys)
	}
}
