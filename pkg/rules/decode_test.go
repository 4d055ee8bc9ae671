package rules

import (
	"reflect"
	"strings"
	"testing"
)

// TestDecode: Decode keeps values as written, with the path and line of
// every value, and keeps decoding past a problem so compile sees the rest.
func TestDecode(t *testing.T) {
	t.Parallel()
	u := func(v uint32) *uint32 { return &v }
	tests := []struct {
		name     string
		src      string
		want     *File
		problems []string // each a Problem.Error() substring
	}{
		{"nested", "domain: d\nalgorithm: SLIDING_WINDOW\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: MINUTE, requests_per_unit: 5, replaces: [{name: r}]}\n    descriptors:\n      - key: c\n        failure_mode: deny\n        rate_limits: [{unlimited: true}]\n",
			&File{Name: "f.yaml", Domain: "d", Algorithm: "SLIDING_WINDOW", Pos: Pos{Line: 1, Lines: map[string]int{"domain": 1, "algorithm": 2, "descriptors": 4}},
				Descriptors: []Descriptor{{
					Key: "k", Value: "v",
					Pos: Pos{Path: "descriptors[0]", Line: 4, Lines: map[string]int{"key": 4, "value": 5, "rate_limit": 6, "descriptors": 8}},
					RateLimit: &RateLimit{Unit: "MINUTE", RequestsPerUnit: u(5),
						Replaces: []Replace{{Name: "r", Pos: Pos{Path: "descriptors[0].rate_limit.replaces[0]", Line: 6, Lines: map[string]int{"name": 6}}}},
						Pos:      Pos{Path: "descriptors[0].rate_limit", Line: 6, Lines: map[string]int{"unit": 6, "requests_per_unit": 6, "replaces": 6}}},
					Descriptors: []Descriptor{{
						Key: "c", FailureMode: "deny",
						Pos:        Pos{Path: "descriptors[0].descriptors[0]", Line: 8, Lines: map[string]int{"key": 8, "failure_mode": 9, "rate_limits": 10}},
						RateLimits: []RateLimit{{Unlimited: true, Pos: Pos{Path: "descriptors[0].descriptors[0].rate_limits[0]", Line: 10, Lines: map[string]int{"unlimited": 10}}}},
					}},
				}}},
			nil},
		{"a bad value is given but zero", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: x, unit_multiplier: 0}\n",
			&File{Name: "f.yaml", Domain: "d", Pos: Pos{Line: 1, Lines: map[string]int{"domain": 1, "descriptors": 3}},
				Descriptors: []Descriptor{{Key: "k", Pos: Pos{Path: "descriptors[0]", Line: 3, Lines: map[string]int{"key": 3, "rate_limit": 4}},
					RateLimit: &RateLimit{UnitMultiplier: u(0), Pos: Pos{Path: "descriptors[0].rate_limit", Line: 4, Lines: map[string]int{"requests_per_unit": 4, "unit_multiplier": 4},
						failed: map[string]bool{"requests_per_unit": true}}}}}},
			[]string{`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "x"`}},
		{"items that are not mappings are left out", "domain: d\ndescriptors: [1, {key: k, bogus: 2}]\n",
			&File{Name: "f.yaml", Domain: "d", Pos: Pos{Line: 1, Lines: map[string]int{"domain": 1, "descriptors": 2}},
				Descriptors: []Descriptor{{Key: "k", Pos: Pos{Path: "descriptors[1]", Line: 2, Lines: map[string]int{"key": 2}, unknown: true}}}},
			[]string{`f.yaml:2: descriptors[0]: want a mapping, got "1"`, `f.yaml:2: descriptors[1].bogus: unknown field "bogus"`}},
		{"burst and algorithm kept as written", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, algorithm: Token_Bucket, burst: 3}\n",
			&File{Name: "f.yaml", Domain: "d", Pos: Pos{Line: 1, Lines: map[string]int{"domain": 1, "descriptors": 3}},
				Descriptors: []Descriptor{{Key: "k", Pos: Pos{Path: "descriptors[0]", Line: 3, Lines: map[string]int{"key": 3, "rate_limit": 4}},
					RateLimit: &RateLimit{Unit: "second", RequestsPerUnit: u(2), Algorithm: "Token_Bucket", Burst: u(3),
						Pos: Pos{Path: "descriptors[0].rate_limit", Line: 4, Lines: map[string]int{"unit": 4, "requests_per_unit": 4, "algorithm": 4, "burst": 4}}}}}},
			nil},
		{"not a mapping", "[1, 2]\n", &File{Name: "f.yaml", Pos: Pos{Line: 1}}, []string{"f.yaml:1: want a mapping, got a list"}},
		{"nothing", "", nil, []string{"f.yaml: not valid YAML: EOF"}},
		{"not YAML", "domain: [\n", nil, []string{"f.yaml:1: not valid YAML"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, problems := Decode("f.yaml", []byte(tt.src))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode = %+v, want %+v", got, tt.want)
			}
			if len(problems) != len(tt.problems) {
				t.Errorf("Decode problems = %v, want %d", problems, len(tt.problems))
			}
			for i, w := range tt.problems {
				if i < len(problems) && !strings.Contains(problems[i].Error(), w) {
					t.Errorf("problem %d = %q, want %q", i, problems[i].Error(), w)
				}
			}
		})
	}
}
