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
			if got := matchName(d, tt.entries); got != tt.want {
				t.Errorf("Match(%v) = %q, want %q", tt.entries, got, tt.want)
			}
		})
	}
	var nilDomain *Domain
	if limits := nilDomain.Match(entries("user", "x")); limits != nil {
		t.Errorf("nil domain matched %v", limits)
	}
}

// matchName returns the name of the first limit d.Match gives, "" for none.
func matchName(d *Domain, e []*rlv3.RateLimitDescriptor_Entry) string {
	if limits := d.Match(e); limits != nil {
		return limits[0].Name
	}
	return ""
}

// TestMatchWhitelist: a descriptor with neither rate_limit nor descriptors
// loads, and a request landing on it gets no limit, as
// envoyproxy/ratelimit's README documents for whitelisting a value. Being
// without a limit does not lower a node's precedence: an exact value still
// beats a wildcard or key-only node that has one.
func TestMatchWhitelist(t *testing.T) {
	t.Parallel()
	d := mustRules(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: any_user}
  - key: user
    value: "adm*"
    rate_limit: {unit: minute, requests_per_unit: 2, name: admins}
  - key: user
    value: admin-ci
  - key: user
    value: root
  - key: database
    value: users
  - key: tenant
    descriptors:
      - key: plan
        value: free
      - key: plan
        rate_limit: {unit: minute, requests_per_unit: 3, name: plan}
`).Domain("d")
	tests := []struct {
		name    string
		entries []*rlv3.RateLimitDescriptor_Entry
		want    string
	}{
		{"whitelisted value beats key only", entries("user", "root"), ""},
		{"whitelisted value beats a wildcard", entries("user", "admin-ci"), ""},
		{"the wildcard still applies to others", entries("user", "admin-2"), "admins"},
		{"key only still applies to others", entries("user", "alice"), "any_user"},
		{"a lone whitelisted descriptor", entries("database", "users"), ""},
		{"nested whitelisted value", entries("tenant", "t", "plan", "free"), ""},
		{"nested key only beside it", entries("tenant", "t", "plan", "pro"), "plan"},
	}
	for _, tt := range tests {
		if got := matchName(d, tt.entries); got != tt.want {
			t.Errorf("%s: Match(%v) = %q, want %q", tt.name, tt.entries, got, tt.want)
		}
	}
}

// TestMatchWildcards: a '*' anywhere in a value is a wildcard. Exact beats
// wildcard beats key only, and among a key's wildcards the first in file
// order that matches wins, as envoyproxy/ratelimit does for its trailing
// wildcards.
func TestMatchWildcards(t *testing.T) {
	t.Parallel()
	d := mustRules(t, `
domain: d
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1, name: any}
  - key: path
    value: /api/v1/health
    rate_limit: {unit: minute, requests_per_unit: 2, name: exact}
  - key: path
    value: "/api/*/users"
    rate_limit: {unit: minute, requests_per_unit: 3, name: middle}
  - key: path
    value: "*.png"
    rate_limit: {unit: minute, requests_per_unit: 4, name: suffix}
  - key: path
    value: "/api/*"
    rate_limit: {unit: minute, requests_per_unit: 5, name: prefix}
  - key: path
    value: "/img/*/thumb*.png"
    rate_limit: {unit: minute, requests_per_unit: 6, name: never} # "*.png" comes first
  - key: path
    value: "/a*b*c"
    descriptors:
      - key: method
        value: "P*"
        rate_limit: {unit: minute, requests_per_unit: 7, name: nested}
`).Domain("d")
	tests := []struct {
		name  string
		value string
		want  string
	}{
		{"exact beats every wildcard", "/api/v1/health", "exact"},
		{"a star in the middle", "/api/v2/users", "middle"},
		{"the middle star may match nothing", "/api//users", "middle"},
		{"a leading star", "/static/logo.png", "suffix"},
		{"a trailing star", "/api/v2/orders", "prefix"},
		{"first in file order wins", "/img/1/thumb-small.png", "suffix"},
		{"no wildcard fits: key only", "/other", "any"},
		{"a star is not a literal", "/api/*/users", "middle"},
	}
	for _, tt := range tests {
		if got := matchName(d, entries("path", tt.value)); got != tt.want {
			t.Errorf("%s: Match(path=%q) = %q, want %q", tt.name, tt.value, got, tt.want)
		}
	}
	if got := matchName(d, entries("path", "/a-b-c", "method", "POST")); got != "nested" {
		t.Errorf("Match(/a-b-c, POST) = %q, want nested", got)
	}
	if got := matchName(d, entries("path", "/a-b-c", "method", "GET")); got != "" {
		t.Errorf("Match(/a-b-c, GET) = %q, want none", got)
	}
}

// TestMatchAllocs: matching is on every request's path and allocates
// nothing, whether it matches exactly, by wildcard, or not at all.
func TestMatchAllocs(t *testing.T) {
	d := mustRules(t, "domain: d\ndescriptors:\n  - key: k\n    value: 'v*'\n    descriptors:\n      - key: p\n        rate_limit: {unit: second, requests_per_unit: 1}\n  - key: m\n    value: 'a*b*c'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n").Domain("d")
	for _, e := range [][]*rlv3.RateLimitDescriptor_Entry{entries("k", "v1", "p", "/"), entries("k", "x"), entries("m", "a-b-c"), entries("m", "a-c-b")} {
		if n := testing.AllocsPerRun(100, func() { d.Match(e) }); n != 0 {
			t.Errorf("Match(%v) made %v allocations, want 0", e, n)
		}
	}
}
