package envoyrls

import (
	"math"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestUnlimitedAndWhitelisted: an unlimited limit answers OK with no
// current_limit and limit_remaining 4294967295, as envoyproxy/ratelimit
// does (requests_per_unit beside it changes nothing); a whitelisted
// descriptor (neither rate_limit nor descriptors) answers OK with no
// current_limit and nothing remaining, as a descriptor with no rule does.
func TestUnlimitedAndWhitelisted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, window.NewMemory(), `
domain: u
descriptors:
  - key: free
    rate_limit: {unlimited: true}
  - key: free_rpu
    rate_limit: {unlimited: true, requests_per_unit: 5}
  - key: mixed
    rate_limits:
      - {unlimited: true}
      - {unit: minute, requests_per_unit: 7}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    value: root
`)
	tests := []struct {
		name      string
		key, val  string
		calls     int    // the last one is checked
		limit     uint32 // current_limit's requests_per_unit; 0 for none
		remaining uint32
	}{
		{"unlimited, never counted", "free", "x", 3, 0, math.MaxUint32},
		{"unlimited with requests_per_unit", "free_rpu", "x", 1, 0, math.MaxUint32},
		{"unlimited beside a limit: the limit reports", "mixed", "x", 1, 7, 6},
		{"whitelisted value", "user", "root", 3, 0, 0},
		{"the key's limit for other values", "user", "alice", 1, 1, 0},
	}
	for _, tt := range tests {
		for range tt.calls - 1 {
			f.call(t, "u", desc(tt.key, tt.val))
		}
		resp := f.call(t, "u", desc(tt.key, tt.val))
		st := resp.Statuses[0]
		if resp.OverallCode != okCode || st.Code != okCode {
			t.Fatalf("%s: %v/%v, want OK", tt.name, resp.OverallCode, st.Code)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != tt.limit || (tt.limit == 0) != (st.CurrentLimit == nil) || st.LimitRemaining != tt.remaining {
			t.Errorf("%s: current_limit %v, remaining %d; want limit %d, remaining %d", tt.name, st.CurrentLimit, st.LimitRemaining, tt.limit, tt.remaining)
		}
	}
}
