package rules

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

func entries(kv ...string) []*rlv3.RateLimitDescriptor_Entry {
	var out []*rlv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestMatch(t *testing.T) {
	t.Parallel()
	r := mustRules(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: any_user}
  - key: user
    value: "bot-*"
    rate_limit: {unit: minute, requests_per_unit: 2, name: bots}
  - key: user
    value: "bot-special"
    rate_limit: {unit: minute, requests_per_unit: 3, name: special}
  - key: user
    value: "b*"
    rate_limit: {unit: minute, requests_per_unit: 4, name: b_later}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5, name: key}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 6, name: key_path}
      - key: method
        value: GET
        descriptors:
          - key: path
            rate_limit: {unit: minute, requests_per_unit: 7, name: key_get_path}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: minute, requests_per_unit: 8, name: free}
`)
	d := r.Domain("d")
	tests := []struct {
		name    string
		entries []*rlv3.RateLimitDescriptor_Entry
		want    string // limit name, "" for no match
	}{
		{"key only", entries("user", "alice"), "any_user"},
		{"empty value falls to key only", entries("user", ""), "any_user"},
		{"exact beats wildcard", entries("user", "bot-special"), "special"},
		{"wildcard beats key only", entries("user", "bot-1"), "bots"},
		{"first wildcard in file order", entries("user", "bo"), "b_later"},
		{"unknown key", entries("other", "x"), ""},
		{"nested", entries("api_key", "k", "path", "/x"), "key_path"},
		{"parent alone", entries("api_key", "k"), "key"},
		{"deeper than the rules: no limit", entries("api_key", "k", "path", "/x", "extra", "1"), ""},
		{"three levels", entries("api_key", "k", "method", "GET", "path", "/y"), "key_get_path"},
		{"stops on a node without a limit", entries("api_key", "k", "method", "GET"), ""},
		{"unmatched value in the middle", entries("api_key", "k", "method", "POST", "path", "/y"), ""},
		{"parent without limit, child with", entries("tenant", "t1", "plan", "free"), "free"},
		{"parent without limit alone", entries("tenant", "t1"), ""},
		{"longer on a leaf", entries("user", "alice", "path", "/x"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if limits := d.Match(tt.entries); limits != nil {
				got = limits[0].Name
			}
			if got != tt.want {
				t.Errorf("Match(%v) = %q, want %q", tt.entries, got, tt.want)
			}
		})
	}
	var nilDomain *Domain
	if limits := nilDomain.Match(entries("user", "x")); limits != nil {
		t.Errorf("nil domain matched %v", limits)
	}
}

// TestMatchAllocs: matching is on every request's path and allocates
// nothing, whether it matches exactly, by wildcard, or not at all.
func TestMatchAllocs(t *testing.T) {
	d := mustRules(t, "domain: d\ndescriptors:\n  - key: k\n    value: 'v*'\n    descriptors:\n      - key: p\n        rate_limit: {unit: second, requests_per_unit: 1}\n").Domain("d")
	for _, e := range [][]*rlv3.RateLimitDescriptor_Entry{entries("k", "v1", "p", "/"), entries("k", "x")} {
		if n := testing.AllocsPerRun(100, func() { d.Match(e) }); n != 0 {
			t.Errorf("Match(%v) made %v allocations, want 0", e, n)
		}
	}
}
