package rules

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// TestSetJSON: a Set renders its files as decoded, values as written, for
// GET /rules; what the rules leave to defaults is left out.
func TestSetJSON(t *testing.T) {
	t.Parallel()
	r := mustRules(t, `
domain: edge
descriptors:
  - key: path
    rate_limit: {unit: second, unit_multiplier: 90, requests_per_unit: 20}
  - key: remote_address
    shadow_mode: true
    rate_limits:
      - {unit: hour, requests_per_unit: 2000}
      - {unit: minute, requests_per_unit: 33, algorithm: sliding_window}
  - key: internal
    rate_limit: {unlimited: true}
  - key: files
    value: "files/*"
    share_threshold: true
    value_to_metric: true
    quota_mode: true
    metadata: {team: storage, weight: 2, tags: [a, null]}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: whitelisted
    value: w
`)
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	tests := []struct {
		text string
		want bool
	}{
		{`"files":["rules.yaml"]`, true},
		{`"domains":[{"domain":"edge","file":"rules.yaml","descriptors":[`, true},
		{`"requests_per_unit":2000`, true},
		{`"unit_multiplier":90`, true},
		{`"shadow_mode":true`, true},
		{`{"requests_per_unit":33,"unit":"minute","algorithm":"sliding_window"}`, true},
		{`"rate_limit":{"unlimited":true}`, true},
		{`"value":"files/*","rate_limit":{"requests_per_unit":10,"unit":"hour"},"value_to_metric":true,"share_threshold":true,"quota_mode":true,"metadata":{"tags":["a",null],"team":"storage","weight":2}}`, true},
		{`{"key":"whitelisted","value":"w"}`, true},
		{`"failure_mode"`, false}, // set nowhere
		{`"Line"`, false},
	}
	for _, tt := range tests {
		if got := strings.Contains(string(js), tt.text); got != tt.want {
			t.Errorf("MarshalJSON = %s\ncontains %s: %v, want %v", js, tt.text, got, tt.want)
		}
	}
	if js, err := json.Marshal(&Set{}); err != nil || string(js) != `{"files":null,"domains":[]}` {
		t.Errorf("MarshalJSON of an empty Set = %s, %v", js, err)
	}
}

// TestLimitIDs: Set.Limits lists every limit a request can match, each
// once, at its ID, in file order, merged domains included, so a server can
// index what it prepares per limit by ID.
func TestLimitIDs(t *testing.T) {
	t.Parallel()
	sources := map[string][]byte{
		"a.yaml": []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 2}\n    descriptors:\n      - key: p\n        rate_limit: {unit: hour, requests_per_unit: 3}\n"),
		"b.yaml": []byte("domain: edge\ndescriptors:\n  - key: ip\n    value: '10.*'\n    rate_limit: {unit: day, requests_per_unit: 4}\n  - key: free\n    rate_limit: {unlimited: true}\n"),
		"c.yaml": []byte("domain: api\ndescriptors:\n  - key: m\n    rate_limit: {unit: week, requests_per_unit: 5}\n"),
	}
	set, err := Options{MergeDomains: true}.Parse([]string{"a.yaml", "b.yaml", "c.yaml"}, sources)
	if err != nil {
		t.Fatal(err)
	}
	limits := set.Limits()
	for i, l := range limits {
		if l.ID() != i {
			t.Errorf("Limits()[%d] has ID %d", i, l.ID())
		}
	}
	// Every limit a request matches is the one at its ID.
	var matched []*Limit
	for _, m := range []struct {
		domain string
		e      []*rlv3.RateLimitDescriptor_Entry
	}{
		{"api", entries("k", "x")},
		{"api", entries("k", "x", "p", "y")},
		{"edge", entries("ip", "10.0.0.1")},
		{"edge", entries("free", "x")},
		{"api", entries("m", "x")},
	} {
		for _, l := range set.Domain(m.domain).Match(m.e) {
			if l.ID() >= len(limits) || limits[l.ID()] != l {
				t.Errorf("%s %v: matched limit %q has ID %d, not its place in Limits", m.domain, m.e, l.Rule, l.ID())
			}
			matched = append(matched, l)
		}
	}
	var got []uint32
	for _, l := range matched {
		got = append(got, l.RequestsPerUnit)
	}
	// File order: a.yaml's three, b.yaml's two (the unlimited one is 0),
	// then c.yaml's, merged into api.
	if want := []uint32{1, 2, 3, 4, 0, 5}; len(limits) != len(want) || !slices.Equal(got, want) {
		t.Errorf("%d limits, matched %v; want %d limits, %v", len(limits), got, len(want), want)
	}
	if (*Set)(nil).Limits() != nil {
		t.Error("a nil Set has limits")
	}
}
