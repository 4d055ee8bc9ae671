package rules

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// keyValues returns, for each entry, what stands for its value in the
// counter key of the first limit e matches.
func keyValues(t *testing.T, d *Domain, e []*rlv3.RateLimitDescriptor_Entry) []string {
	t.Helper()
	limits := d.Match(e)
	if len(limits) == 0 {
		t.Fatalf("Match(%v) = none", e)
	}
	out := make([]string, len(e))
	for i := range e {
		out[i] = limits[0].KeyValue(i, e[i].Value)
	}
	return out
}

// TestShareThreshold: every value a share_threshold wildcard matches is
// keyed by the pattern, also when the limit is on a node below it (the
// entry index is tracked, as in envoyproxy/ratelimit); other entries keep
// their own values, and wildcards without it give each value its own key.
func TestShareThreshold(t *testing.T) {
	t.Parallel()
	d := mustRules(t, `
domain: d
descriptors:
  - key: files
    value: "files/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: own
    value: "own/*"
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value: "api/*/v*"
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 60}
      - key: tier
        value: "g*"
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`).Domain("d")
	tests := []struct {
		name    string
		entries []*rlv3.RateLimitDescriptor_Entry
		want    []string
	}{
		{"leaf wildcard", entries("files", "files/a.pdf"), []string{"files/*"}},
		{"another value, the same key", entries("files", "files/b.csv"), []string{"files/*"}},
		{"the pattern itself", entries("files", "files/*"), []string{"files/*"}},
		{"without share_threshold", entries("own", "own/a"), []string{"own/a"}},
		{"wildcard with children", entries("route", "api/x/v1", "user", "alice"), []string{"api/*/v*", "alice"}},
		{"two shared entries", entries("route", "api/y/v2", "tier", "gold"), []string{"api/*/v*", "g*"}},
	}
	for _, tt := range tests {
		got := keyValues(t, d, tt.entries)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: key values %q, want %q", tt.name, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: key values %q, want %q", tt.name, got, tt.want)
				break
			}
		}
	}
	var override Limit // an override has no path: its values are its own
	if got := override.KeyValue(0, "v"); got != "v" {
		t.Errorf("override KeyValue = %q, want v", got)
	}
}

// TestValueToMetric: a limit's metric label is its rule unless value_to_metric
// asks for request values; then it is envoyproxy/ratelimit's stats key less
// the domain. Written values always show; key-only and wildcard nodes show
// the request's value where they set value_to_metric; share_threshold keeps
// the pattern; detailed_metric takes precedence (no ValueToMetric).
func TestValueToMetric(t *testing.T) {
	t.Parallel()
	d := mustRules(t, `
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shared
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        rate_limits:
          - {unit: minute, requests_per_unit: 60}
          - {unit: hour, requests_per_unit: 600}
  - key: plain
    value: "p*"
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: detailed
    value_to_metric: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`).Domain("d")
	tests := []struct {
		name          string
		entries       []*rlv3.RateLimitDescriptor_Entry
		index         int
		valueToMetric bool
		want          string
	}{
		{"key-only values", entries("route", "api", "http_method", "GET", "subject_id", "123"), 0, true, "route_api.http_method_GET.subject_id"},
		{"a wildcard shows the whole value", entries("user", "alice", "action", "readfile", "resource", "documents"), 0, true, "user_alice.action_readfile.resource"},
		{"share_threshold keeps the pattern", entries("shared", "api/v1", "method", "GET"), 0, true, "shared_api/*.method_GET"},
		{"a later rate_limits entry", entries("shared", "api/v1", "method", "GET"), 1, true, "shared_api/*.method_GET[1]"},
		{"no value_to_metric: the rule", entries("plain", "pq", "method", "GET"), 0, false, "plain_p*.method_GET"},
		{"detailed_metric takes precedence", entries("detailed", "x"), 0, false, "detailed_x"},
	}
	for _, tt := range tests {
		limits := d.Match(tt.entries)
		if len(limits) <= tt.index {
			t.Fatalf("%s: Match = %v", tt.name, limits)
		}
		l := limits[tt.index]
		if l.ValueToMetric != tt.valueToMetric {
			t.Errorf("%s: ValueToMetric = %v, want %v", tt.name, l.ValueToMetric, tt.valueToMetric)
		}
		if got := string(l.AppendMetricRule(nil, tt.entries)); got != tt.want {
			t.Errorf("%s: AppendMetricRule = %q, want %q", tt.name, got, tt.want)
		}
		if !l.ValueToMetric && !l.DetailedMetric && l.Rule != tt.want {
			t.Errorf("%s: Rule = %q, want the label %q", tt.name, l.Rule, tt.want)
		}
	}
}
