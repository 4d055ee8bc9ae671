package xds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func TestParseDefaultsProblems(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, data, want string }{
		{"unknown field", "domains:\n  d:\n    failure_mod: allow\n", "field failure_mod not found"},
		{"unknown top-level field", "domain: d\n", "field domain not found"},
		{"bad failure mode", "domains:\n  d:\n    failure_mode: maybe\n", `defaults.yaml: domains["d"].failure_mode: unknown failure mode "maybe"`},
		{"bad algorithm", "domains:\n  d:\n    rules:\n      r:\n        algorithm: leaky\n", `domains["d"].rules["r"].algorithm: unknown algorithm "leaky"`},
		{"bad multiplier", "domains:\n  d:\n    rules:\n      r:\n        unit_multiplier: -1\n", "cannot unmarshal"},
		{"burst without a bucket", "domains:\n  d:\n    rules:\n      r:\n        burst: 5\n", `domains["d"].rules["r"].burst: applies only to algorithm token_bucket, and this limit's algorithm is fixed_window`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := ParseDefaults("defaults.yaml", []byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseDefaults = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.yaml")
	if err := os.WriteFile(path, []byte("domains:\n  d:\n    failure_mode: deny\n    rules:\n      named:\n        unit_multiplier: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDefaults(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDefaults(path + ".missing"); err == nil {
		t.Error("LoadDefaults of a missing file: nil error")
	}
	if _, err := ParseDefaults("empty", nil); err != nil {
		t.Errorf("ParseDefaults of an empty file = %v, want nil", err)
	}
	// A named limit is found by its name; a setting in the proto's form
	// (none exists for failure_mode today) is never overridden.
	f := rules.FromProto("xds:d", &rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Name: "named", Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1},
	}}})
	f.FailureMode = "allow"
	d.Apply(f)
	if f.FailureMode != "allow" || *f.Descriptors[0].RateLimit.UnitMultiplier != 5 {
		t.Errorf("Apply: failure_mode %q, multiplier %d, want allow (kept) and 5", f.FailureMode, *f.Descriptors[0].RateLimit.UnitMultiplier)
	}
	(*Defaults)(nil).Apply(f) // a nil Defaults applies nothing
}

// TestDefaultsAlgorithms: the new algorithms and burst come from the
// defaults file as the others do; a rule's burst checks against the
// algorithm it inherits from its domain, or from "*".
func TestDefaultsAlgorithms(t *testing.T) {
	t.Parallel()
	d, err := ParseDefaults("d.yaml", []byte("domains:\n  \"*\":\n    algorithm: token_bucket\n  d:\n    rules:\n      k:\n        burst: 7\n      l:\n        algorithm: sliding_log\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := rules.FromProto("xds:d", &rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 2}},
		{Key: "l", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 20}},
	}})
	d.Apply(f)
	set, err := (rules.Options{}).Compile([]*rules.File{f})
	if err != nil {
		t.Fatal(err)
	}
	dom := set.Domain("d")
	k := dom.Match([]*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "x"}})
	l := dom.Match([]*rlv3.RateLimitDescriptor_Entry{{Key: "l", Value: "x"}})
	if len(k) != 1 || k[0].Algorithm != window.TokenBucket || k[0].Burst != 7 {
		t.Errorf("k = %+v, want a token bucket of burst 7", k)
	}
	if len(l) != 1 || l[0].Algorithm != window.SlidingLog {
		t.Errorf("l = %+v, want a sliding log", l)
	}
}
