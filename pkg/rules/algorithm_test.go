package rules

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestCompileAlgorithms: token_bucket and sliding_log are accepted
// wherever an algorithm is, in any case, and inherited like the others;
// burst defaults to requests_per_unit and is kept when given.
func TestCompileAlgorithms(t *testing.T) {
	t.Parallel()
	const d = "domain: d\n"
	tests := []struct {
		name      string
		src       string
		algorithm window.Algorithm
		burst     uint32
		capacity  uint64
	}{
		{"bucket on the limit", d + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 3}\n", window.TokenBucket, 3, 3},
		{"bucket burst defaults to the rate", d + "descriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: TOKEN_BUCKET}\n", window.TokenBucket, 60, 60},
		{"bucket from the domain", d + "algorithm: token_bucket\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, burst: 1}\n", window.TokenBucket, 1, 1},
		{"burst below the rate", d + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 1}\n", window.TokenBucket, 1, 1},
		{"one per microsecond", d + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}\n", window.TokenBucket, 1000000, 1000000},
		{"zero rate", d + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket}\n", window.TokenBucket, 0, 0},
		{"zero rate holds nothing whatever its burst", d + "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket, burst: 5}\n", window.TokenBucket, 5, 0},
		{"bucket filling in 104 days", d + "descriptors:\n  - key: k\n    rate_limit: {unit: day, unit_multiplier: 104, requests_per_unit: 104, algorithm: token_bucket}\n", window.TokenBucket, 104, 104},
		{"log on the limit", d + "descriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_log}\n", window.SlidingLog, 0, 1000},
		{"log from the domain", d + "algorithm: Sliding_Log\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n", window.SlidingLog, 0, 5},
		{"limit overrides the domain's bucket", d + "algorithm: token_bucket\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}\n", window.FixedWindow, 0, 5},
		{"unlimited takes no burst", d + "algorithm: token_bucket\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n", window.TokenBucket, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set := mustRules(t, tt.src)
			l := set.Domain("d").Match(entries("k", "v"))[0]
			if l.Algorithm != tt.algorithm || l.Burst != tt.burst || l.Capacity() != tt.capacity {
				t.Errorf("limit algorithm %v burst %d capacity %d, want %v %d %d", l.Algorithm, l.Burst, l.Capacity(), tt.algorithm, tt.burst, tt.capacity)
			}
		})
	}
}

// TestAlgorithmProblems: a burst where it means nothing, a bucket that
// refills faster than one token per microsecond or takes longer than
// window.MaxBucketSpan to fill, and a sliding log above
// MaxSlidingLogLimit are each one problem naming file, line, field and
// the bound.
func TestAlgorithmProblems(t *testing.T) {
	t.Parallel()
	const d = "domain: d\ndescriptors:\n  - key: k\n"
	tests := []struct {
		name string
		src  string
		want string // the only problem
	}{
		{"unknown algorithm", "domain: d\nalgorithm: leaky_bucket\n",
			`rules.yaml:2: algorithm: unknown algorithm "leaky_bucket" (want fixed_window, sliding_window, token_bucket or sliding_log)`},
		{"burst on a fixed window", d + "    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n",
			"rules.yaml:7: descriptors[0].rate_limit.burst: applies only to algorithm token_bucket, and this limit's algorithm is fixed_window"},
		{"burst on a log from the domain", "domain: d\nalgorithm: sliding_log\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n",
			"rules.yaml:5: descriptors[0].rate_limit.burst: applies only to algorithm token_bucket, and this limit's algorithm is sliding_log"},
		{"burst zero", d + "    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 0}\n",
			"rules.yaml:4: descriptors[0].rate_limit.burst: must be a positive whole number, got 0"},
		{"burst not a number", d + "    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: lots}\n",
			`rules.yaml:4: descriptors[0].rate_limit.burst: want a whole number from 0 to 4294967295, got "lots"`},
		{"burst on unlimited", d + "    rate_limit: {unlimited: true, algorithm: token_bucket, burst: 2}\n",
			"rules.yaml:4: descriptors[0].rate_limit.burst: an unlimited limit takes no burst"},
		{"burst with an unknown algorithm", d + "    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky, burst: 2}\n",
			`rules.yaml:4: descriptors[0].rate_limit.algorithm: unknown algorithm "leaky" (want fixed_window, sliding_window, token_bucket or sliding_log)`},
		{"bucket faster than a microsecond", d + "    rate_limit:\n      unit: second\n      requests_per_unit: 1000001\n      algorithm: token_bucket\n",
			"rules.yaml:6: descriptors[0].rate_limit.requests_per_unit: 1000001 per 1s is more than one per microsecond, the fastest a token_bucket refills (at most 1000000 per 1s)"},
		{"burst too slow to fill", d + "    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 9007200}\n",
			"rules.yaml:4: descriptors[0].rate_limit.burst: burst 9007200 at one token per 1s takes longer than 2^53 ns (about 104.25 days) to fill, the longest a token_bucket may take; at this rate burst may be at most 9007199"},
		{"default burst too slow to fill", d + "    rate_limit: {unit: day, unit_multiplier: 105, requests_per_unit: 1, algorithm: token_bucket}\n",
			"rules.yaml:4: descriptors[0].rate_limit.requests_per_unit: burst (requests_per_unit, as burst is not set) 1 at one token per 2520h0m0s takes longer than 2^53 ns (about 104.25 days) to fill, the longest a token_bucket may take; at this rate not one token fits: shorten the window or raise requests_per_unit"},
		{"log above the cap", d + "    rate_limit: {unit: minute, requests_per_unit: 1001, algorithm: sliding_log}\n",
			"rules.yaml:4: descriptors[0].rate_limit.requests_per_unit: 1001 is more than 1000, the most a sliding_log limit holds: it keeps one entry per hit of its window (use token_bucket or sliding_window for larger limits)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			re := parseError(t, tt.src)
			if len(re.Problems) != 1 || re.Problems[0].Error() != tt.want {
				t.Errorf("problems = %q, want only %q", re.lines(), tt.want)
			}
		})
	}
}

// TestAlgorithmJSON: GET /rules shows a limit's algorithm and burst as
// written.
func TestAlgorithmJSON(t *testing.T) {
	t.Parallel()
	set := mustRules(t, "domain: d\nalgorithm: sliding_log\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 3}\n")
	js, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"algorithm":"sliding_log"`, `"rate_limit":{"requests_per_unit":2,"unit":"second","algorithm":"token_bucket","burst":3}`} {
		if !strings.Contains(string(js), w) {
			t.Errorf("MarshalJSON = %s, want %s in it", js, w)
		}
	}
}
