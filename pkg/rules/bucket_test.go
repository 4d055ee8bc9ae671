package rules

import (
	"slices"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// bucketRules covers every kind of node MatchBucket walks: key only,
// wildcards, exact values, whitelists, nesting, and two orders of the same
// keys.
const bucketRules = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: any_user}
  - key: user
    value: "bot-*"
    rate_limit: {unit: minute, requests_per_unit: 2, name: bots}
  - key: user
    value: trusted
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5, name: key}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 6, name: key_path}
      - key: method
        value: GET
        descriptors:
          - key: path
            rate_limits:
              - {unit: minute, requests_per_unit: 7, name: key_get_path}
              - {unit: hour, requests_per_unit: 70, name: key_get_path_hourly}
  - key: path
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 9, name: path_key}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: minute, requests_per_unit: 8, name: free}
`

func bucketNames(limits []*Limit) string {
	var names []string
	for _, l := range limits {
		names = append(names, l.Name)
	}
	return strings.Join(names, ",")
}

func entryString(es []*rlv3.RateLimitDescriptor_Entry) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, e.Key+"="+e.Value)
	}
	return strings.Join(parts, ",")
}

func TestMatchBucket(t *testing.T) {
	t.Parallel()
	d := mustRules(t, bucketRules).Domain("d")
	tests := []struct {
		name        string
		bucket      map[string]string
		wantLimits  string // limit names, "," joined
		wantEntries string // path order; "" when no path uses every key
	}{
		{"key only", map[string]string{"user": "alice"}, "any_user", "user=alice"},
		{"wildcard", map[string]string{"user": "bot-1"}, "bots", "user=bot-1"},
		{"whitelisted value", map[string]string{"user": "trusted"}, "", "user=trusted"},
		{"empty value is key only", map[string]string{"user": ""}, "any_user", "user="},
		{"unknown key", map[string]string{"other": "x"}, "", ""},
		{"parent alone", map[string]string{"api_key": "k"}, "key", "api_key=k"},
		// Both api_key→path and path→api_key use these keys: the sorted
		// order tries api_key first.
		{"two orders: sorted keys decide", map[string]string{"path": "/x", "api_key": "k"}, "key_path", "api_key=k,path=/x"},
		{"three levels, several limits", map[string]string{"path": "/y", "method": "GET", "api_key": "k"},
			"key_get_path,key_get_path_hourly", "api_key=k,method=GET,path=/y"},
		{"an unmatched value leaves no path", map[string]string{"path": "/y", "method": "POST", "api_key": "k"}, "", ""},
		{"a key more than the rules", map[string]string{"user": "alice", "extra": "1"}, "", ""},
		{"parent without limit", map[string]string{"tenant": "t"}, "", "tenant=t"},
		{"parent without limit, child with", map[string]string{"plan": "free", "tenant": "t"}, "free", "tenant=t,plan=free"},
		{"empty bucket", map[string]string{}, "", ""},
		{"nil bucket", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limits, es := d.MatchBucket(tt.bucket)
			if got := bucketNames(limits); got != tt.wantLimits {
				t.Errorf("MatchBucket(%v) limits = %q, want %q", tt.bucket, got, tt.wantLimits)
			}
			if got := entryString(es); got != tt.wantEntries {
				t.Errorf("MatchBucket(%v) entries = %q, want %q", tt.bucket, got, tt.wantEntries)
			}
		})
	}
	var nilDomain *Domain
	if limits, es := nilDomain.MatchBucket(map[string]string{"user": "x"}); limits != nil || es != nil {
		t.Errorf("nil domain matched %v %v", limits, es)
	}
}

// TestMatchBucketSecondOrder: when the first order the sorted keys try
// dead-ends, the walk backs up and finds the other.
func TestMatchBucketSecondOrder(t *testing.T) {
	t.Parallel()
	d := mustRules(t, `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: c
        rate_limit: {unit: minute, requests_per_unit: 1, name: ac}
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: minute, requests_per_unit: 2, name: ba}
`).Domain("d")
	limits, es := d.MatchBucket(map[string]string{"a": "1", "b": "2"})
	if got := bucketNames(limits); got != "ba" {
		t.Errorf("limits = %q, want ba", got)
	}
	if got := entryString(es); got != "b=2,a=1" {
		t.Errorf("entries = %q, want b=2,a=1", got)
	}
}

// checkBucketMatch states what MatchBucket promises for any bucket: the
// entries use every key of the bucket once with its value, Match gives the
// same limits for them, and a second call answers the same.
func checkBucketMatch(t *testing.T, d *Domain, bucket map[string]string) {
	t.Helper()
	limits, es := d.MatchBucket(bucket)
	if es == nil {
		if limits != nil {
			t.Fatalf("MatchBucket(%q) = limits %v without entries", bucket, bucketNames(limits))
		}
		return
	}
	if len(es) != len(bucket) {
		t.Fatalf("MatchBucket(%q) entries %q: not one per key", bucket, entryString(es))
	}
	seen := map[string]bool{}
	for _, e := range es {
		if v, ok := bucket[e.Key]; !ok || v != e.Value || seen[e.Key] {
			t.Fatalf("MatchBucket(%q) entries %q: not the bucket's", bucket, entryString(es))
		}
		seen[e.Key] = true
	}
	if m := d.Match(es); !slices.Equal(m, limits) {
		t.Fatalf("MatchBucket(%q) = %q, but Match(%q) = %q", bucket, bucketNames(limits), entryString(es), bucketNames(m))
	}
	again, es2 := d.MatchBucket(bucket)
	if !slices.Equal(again, limits) || entryString(es2) != entryString(es) {
		t.Fatalf("MatchBucket(%q) not deterministic", bucket)
	}
}

// FuzzMatchBucket: whatever the bucket, MatchBucket never panics, and its
// answer is one Match agrees with (checkBucketMatch). The input is a
// bucket written as key=value lines.
func FuzzMatchBucket(f *testing.F) {
	d := mustRules(f, bucketRules).Domain("d")
	for _, s := range []string{"user=alice", "api_key=k\npath=/x", "path=/y\nmethod=GET\napi_key=k", "tenant=t\nplan=free", "user=bot-", "=\n=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bucket := map[string]string{}
		for line := range strings.SplitSeq(s, "\n") {
			k, v, _ := strings.Cut(line, "=")
			bucket[k] = v
		}
		checkBucketMatch(t, d, bucket)
	})
}
