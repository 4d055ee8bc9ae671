package rules

import (
	"encoding/json"
	"strings"
	"testing"
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
