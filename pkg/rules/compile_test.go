package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestCompile: limits take their settings from where they are written and
// inherit the rest.
func TestCompile(t *testing.T) {
	t.Parallel()
	r := mustRules(t, `
domain: edge
failure_mode: allow
descriptors:
  - key: api_key
    rate_limit: {unit: MINUTE, requests_per_unit: 100, name: per_key}
    descriptors:
      - key: path
        failure_mode: deny
        rate_limit: {unit: second, unit_multiplier: 90, requests_per_unit: 20}
  - key: remote_address
    shadow_mode: true
    rate_limits:
      - {unit: hour, requests_per_unit: 2000}
      - {unit: minute, requests_per_unit: 33, algorithm: sliding_window}
  - key: internal
    rate_limit: {unlimited: true}
`)
	d := r.Domain("edge")
	if d == nil {
		t.Fatal("domain edge missing")
	}
	key := d.root.keyOnly["api_key"]
	if key == nil || len(key.limits) != 1 {
		t.Fatalf("api_key node = %+v", key)
	}
	l := key.limits[0]
	if l.RequestsPerUnit != 100 || l.Unit != window.Minute || l.Size != time.Minute || l.Name != "per_key" || l.Rule != "per_key" || l.Path != "api_key" || l.FailureMode != FailAllow {
		t.Errorf("api_key limit = %+v", l)
	}
	p := key.keyOnly["path"].limits[0]
	if p.Size != 90*time.Second || p.Multiplier != 90 || p.FailureMode != FailDeny || p.Rule != "api_key.path" || p.Path != p.Rule {
		t.Errorf("path limit = %+v", p)
	}
	ra := d.root.keyOnly["remote_address"].limits
	if len(ra) != 2 || !ra[0].Shadow || !ra[1].Shadow || ra[1].Algorithm != window.SlidingWindow || ra[0].Algorithm != window.FixedWindow || ra[1].Rule != "remote_address[1]" || ra[1].Path != ra[1].Rule {
		t.Errorf("remote_address limits = %+v %+v", ra[0], ra[1])
	}
	if u := d.root.keyOnly["internal"].limits[0]; !u.Unlimited {
		t.Errorf("internal limit = %+v, want unlimited", u)
	}
}

// TestCompileWithoutPositions: compile takes files from any decoder, such
// as one of xDS, that knows no lines: fields count as given by their
// values, and problems name the field without a line.
func TestCompileWithoutPositions(t *testing.T) {
	t.Parallel()
	one := uint32(1)
	tests := []struct {
		name string
		file File
		want []string // each a Problem.Error() substring; none for a valid file
	}{
		{"valid", File{Name: "x", Domain: "d", Descriptors: []Descriptor{
			{Key: "k", RateLimit: &RateLimit{Unit: "minute", RequestsPerUnit: &one}},
		}}, nil},
		{"missing domain and key", File{Name: "x", Descriptors: []Descriptor{
			{Pos: Pos{Path: "descriptors[0]"}, RateLimit: &RateLimit{Unlimited: true}},
		}}, []string{"x: domain: missing", "x: descriptors[0].key: missing"}},
		{"unknown unit, no number", File{Name: "x", Domain: "d", Descriptors: []Descriptor{
			{Key: "k", Pos: Pos{Path: "descriptors[0]"}, RateLimit: &RateLimit{Unit: "fortnight", Pos: Pos{Path: "descriptors[0].rate_limit"}}},
		}}, []string{`x: descriptors[0].rate_limit.unit: unknown unit "fortnight"`, "x: descriptors[0].rate_limit.requests_per_unit: missing"}},
		{"neither limit nor children whitelists", File{Name: "x", Domain: "d", Descriptors: []Descriptor{{Key: "k", Pos: Pos{Path: "descriptors[0]"}}}}, nil},
		{"share_threshold without wildcard", File{Name: "x", Domain: "d", Descriptors: []Descriptor{{Key: "k", Value: "v", ShareThreshold: true, Pos: Pos{Path: "descriptors[0]"}}}},
			[]string{"x: descriptors[0].share_threshold: applies only to a wildcard value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, err := compile([]*File{&tt.file})
			if len(tt.want) == 0 {
				if err != nil || set.Domain(tt.file.Domain) == nil {
					t.Fatalf("compile = %v, %v, want domain %q", set, err, tt.file.Domain)
				}
				return
			}
			var re *Error
			if !errors.As(err, &re) {
				t.Fatalf("compile = %v, want an *Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%s\nlacks %q", err, w)
				}
			}
			if len(re.Problems) != len(tt.want) {
				t.Errorf("%d problems, want %d", len(re.Problems), len(tt.want))
			}
		})
	}
}

// TestCompileOverLimit: over_limit is inherited like failure_mode, charge
// when no one sets it; quota_mode makes a descriptor's own limits charge
// unless it sets over_limit itself, and its children do not inherit that.
func TestCompileOverLimit(t *testing.T) {
	t.Parallel()
	r := mustRules(t, `
domain: d
over_limit: refuse
descriptors:
  - key: admission
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: budget
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: model
        rate_limit: {unit: hour, requests_per_unit: 500}
  - key: strict_budget
    quota_mode: true
    over_limit: refuse
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: tokens
    over_limit: CHARGE
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 5000, algorithm: sliding_window}
`)
	d := r.Domain("d")
	if d.OverLimit != OverLimitRefuse {
		t.Errorf("domain OverLimit = %v, want refuse", d.OverLimit)
	}
	tests := []struct {
		path []string
		want OverLimit
	}{
		{[]string{"admission"}, OverLimitRefuse},
		{[]string{"budget"}, OverLimitCharge},
		{[]string{"budget", "model"}, OverLimitRefuse},
		{[]string{"strict_budget"}, OverLimitRefuse},
		{[]string{"tokens", "user"}, OverLimitCharge},
	}
	for _, tt := range tests {
		n := d.root
		for _, k := range tt.path {
			n = n.keyOnly[k]
		}
		if got := n.limits[0].OverLimit; got != tt.want {
			t.Errorf("%v: OverLimit = %v, want %v", tt.path, got, tt.want)
		}
	}
	if got := mustRules(t, "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n").Domain("x"); got.OverLimit != OverLimitCharge || got.root.keyOnly["k"].limits[0].OverLimit != OverLimitCharge {
		t.Errorf("default OverLimit = %v, want charge", got.OverLimit)
	}
	_, err := parseOne(t, "domain: x\nover_limit: spend\ndescriptors:\n  - key: k\n    over_limit: 3\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	for _, w := range []string{`rules.yaml:2: over_limit: unknown over_limit "spend" (want charge or refuse)`, `rules.yaml:5: descriptors[0].over_limit: unknown over_limit "3"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Parse = %v, want a problem %q", err, w)
		}
	}
}
