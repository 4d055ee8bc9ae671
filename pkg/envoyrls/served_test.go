package envoyrls

import (
	"encoding/json"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestDenialsSwapWithRules: the 429 a limit's denials share is the served
// rules' own. A reload that changes the limit at the same place (same
// Limit.ID) must not serve the old rules' body, even at the same
// retry-after, which a table kept across the swap would.
func TestDenialsSwapWithRules(t *testing.T) {
	t.Parallel()
	const (
		before = "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, name: old}\n"
		after  = "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, name: new}\n"
	)
	f := newFixture(t, window.NewMemory(), before)
	deny := func(want string) {
		t.Helper()
		resp := f.call(t, "api", desc("k", "v"))
		var body tooManyRequests
		if err := json.Unmarshal(resp.RawBody, &body); err != nil {
			t.Fatalf("body %q: %v", resp.RawBody, err)
		}
		if resp.OverallCode != overCode || body.Message != want || body.RetryAfterSeconds != 45 {
			t.Fatalf("%v, body %+v; want OVER_LIMIT, %q, retry-after 45", resp.OverallCode, body, want)
		}
	}
	f.call(t, "api", desc("k", "v"))
	deny("rate limit of 1 per minute exceeded (old)") // t0 is 15 s into its minute
	f.srv.SetRules(mustRules(t, after))
	deny("rate limit of 1 per minute exceeded (new)")
	if got := f.srv.Rules().Limits()[0].Name; got != "new" {
		t.Fatalf("served rules' limit 0 = %q, want new", got)
	}
}

// TestKeptDenialAllocatesNothing: a fixed window's denial at the
// retry-after its limit last answered with reuses the prepared 429, so
// a key under attack costs no allocation for it; the other algorithms
// and overrides build theirs. BenchmarkShouldRateLimitHotKey measures the
// same on the whole denial path.
func TestKeptDenialAllocatesNothing(t *testing.T) {
	set := mustRules(t, testRules+"  - key: bucket\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket}\n")
	v := newServed(set)
	for _, tt := range []struct {
		key      string
		override bool
		kept     bool // reuses its 429: no allocation
	}{
		{"api_key", false, true},
		{"sliding", false, false},
		{"bucket", false, false},
		{"api_key", true, false},
	} {
		l := set.Domain("api").Match(desc(tt.key, "x").Entries)[0]
		if tt.override {
			c := *l
			c.Override = true
			l = &c
		}
		first := v.tooMany("api", 7, l)
		got := testing.AllocsPerRun(100, func() {
			if v.tooMany("api", 7, l) != first && tt.kept {
				t.Fatal("a denial at the same retry-after built its 429 anew")
			}
		})
		if (got == 0) != tt.kept {
			t.Errorf("%s (override %v): %v allocations per denial; want none: %v", tt.key, tt.override, got, tt.kept)
		}
	}
}

// BenchmarkTooMany reports the allocations of a fixed window's denial
// that reuses its prepared 429 (0), and of one that builds it.
func BenchmarkTooMany(b *testing.B) {
	set := mustRules(b, testRules)
	v := newServed(set)
	for _, tt := range []struct {
		name string
		key  string
	}{{"fixed-kept", "api_key"}, {"sliding-built", "sliding"}} {
		l := set.Domain("api").Match(desc(tt.key, "x").Entries)[0]
		b.Run(tt.name, func(b *testing.B) {
			resp := &rlsv3.RateLimitResponse{OverallCode: overCode}
			b.ReportAllocs()
			for b.Loop() {
				addTooManyRequests(resp, v, "api", 7*time.Second, l)
			}
		})
	}
}
