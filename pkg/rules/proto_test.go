package rules

import (
	"errors"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// protoCompile compiles a RateLimitConfig of domain d whose one descriptor k=v
// is d, compiled through FromProto.
func protoCompile(t *testing.T, d *rlsconfv3.RateLimitDescriptor) (*Set, error) {
	t.Helper()
	f := FromProto("xds:d", &rlsconfv3.RateLimitConfig{Name: "d", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}})
	return Options{}.Compile([]*File{f})
}

// TestFromProto maps each field of the proto, one per case, and checks
// what the compiled limit of k=v makes of it.
func TestFromProto(t *testing.T) {
	t.Parallel()
	perMinute := func(n uint32) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}
	}
	meta, err := structpb.NewStruct(map[string]any{"tier": "gold", "n": 2.0})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		desc  *rlsconfv3.RateLimitDescriptor
		check func(t *testing.T, l *Limit)
	}{
		{"requests_per_unit and unit", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: perMinute(7)}, func(t *testing.T, l *Limit) {
			if l.RequestsPerUnit != 7 || l.Unit != window.Minute || l.Multiplier != 1 {
				t.Errorf("limit = %d per %v x%d, want 7 per minute x1", l.RequestsPerUnit, l.Unit, l.Multiplier)
			}
		}},
		{"requests_per_unit 0 denies all", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: perMinute(0)}, func(t *testing.T, l *Limit) {
			if l.RequestsPerUnit != 0 || l.Unlimited {
				t.Errorf("limit = %d unlimited %v, want 0 and limited", l.RequestsPerUnit, l.Unlimited)
			}
		}},
		{"shadow_mode", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: perMinute(1), ShadowMode: true}, func(t *testing.T, l *Limit) {
			if !l.Shadow {
				t.Error("Shadow = false, want true")
			}
		}},
		{"detailed_metric", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: perMinute(1), DetailedMetric: true}, func(t *testing.T, l *Limit) {
			if !l.DetailedMetric {
				t.Error("DetailedMetric = false, want true")
			}
		}},
		{"quota_mode", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: perMinute(1), QuotaMode: true}, func(t *testing.T, l *Limit) {
			if !l.QuotaMode {
				t.Error("QuotaMode = false, want true")
			}
		}},
		{"metadata", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: perMinute(1), Metadata: meta}, func(t *testing.T, l *Limit) {
			if got := l.Metadata.GetFields()["tier"].GetStringValue(); got != "gold" {
				t.Errorf("Metadata tier = %q, want gold", got)
			}
		}},
		{"unlimited", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, RequestsPerUnit: 9}}, func(t *testing.T, l *Limit) {
			if !l.Unlimited {
				t.Error("Unlimited = false, want true")
			}
		}},
		{"name", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1, Name: "n"}}, func(t *testing.T, l *Limit) {
			if l.Name != "n" || l.Rule != "n" {
				t.Errorf("Name, Rule = %q, %q, want n, n", l.Name, l.Rule)
			}
		}},
		{"replaces", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1,
			Replaces: []*rlsconfv3.RateLimitReplace{{Name: "other"}}}}, func(t *testing.T, l *Limit) {
			if len(l.Replaces) != 1 || l.Replaces[0] != "other" {
				t.Errorf("Replaces = %q, want [other]", l.Replaces)
			}
		}},
		{"nested descriptors", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "sub", RateLimit: perMinute(3)}}}, nil},
	}
	units := map[rlsconfv3.RateLimitUnit]window.Unit{
		rlsconfv3.RateLimitUnit_SECOND: window.Second, rlsconfv3.RateLimitUnit_MINUTE: window.Minute,
		rlsconfv3.RateLimitUnit_HOUR: window.Hour, rlsconfv3.RateLimitUnit_DAY: window.Day,
		rlsconfv3.RateLimitUnit_WEEK: window.Week, rlsconfv3.RateLimitUnit_MONTH: window.Month,
		rlsconfv3.RateLimitUnit_YEAR: window.Year,
	}
	for pu, wu := range units {
		tests = append(tests, struct {
			name  string
			desc  *rlsconfv3.RateLimitDescriptor
			check func(t *testing.T, l *Limit)
		}{"unit " + pu.String(), &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: pu, RequestsPerUnit: 1}},
			func(t *testing.T, l *Limit) {
				if l.Unit != wu {
					t.Errorf("Unit = %v, want %v", l.Unit, wu)
				}
			}})
	}
	if len(rlsconfv3.RateLimitUnit_name) != len(units)+1 {
		t.Errorf("the proto has %d units, the test maps %d and UNKNOWN: map the new one", len(rlsconfv3.RateLimitUnit_name), len(units))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, err := protoCompile(t, tt.desc)
			if err != nil {
				t.Fatalf("Compile = %v", err)
			}
			path := []string{"k", "v"}
			if tt.check == nil {
				path = append(path, "sub", "x")
			}
			ls := set.Domain("d").Match(entries(path...))
			if len(ls) != 1 {
				t.Fatalf("Match(%v) = %d limits, want 1", path, len(ls))
			}
			if tt.check != nil {
				tt.check(t, ls[0])
			}
		})
	}
}

// TestFromProtoProblems: a bad resource's problems name the resource and
// the field's path.
func TestFromProtoProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		desc *rlsconfv3.RateLimitDescriptor
		want string
	}{
		{"unknown unit", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}},
			"xds:d: descriptors[0].rate_limit.unit: missing"},
		{"unit number not named", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 42, RequestsPerUnit: 1}},
			`xds:d: descriptors[0].rate_limit.unit: unknown unit "42"`},
		{"no key", &rlsconfv3.RateLimitDescriptor{Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: ""}}},
			"xds:d: descriptors[0].key: missing"},
		{"nested no key", &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Value: "x"}}},
			"xds:d: descriptors[0].descriptors[0].key: missing"},
		{"unlimited with a unit", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_SECOND}},
			"descriptors[0].rate_limit.unit: an unlimited limit takes no unit"},
		{"replaces its own", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, Name: "a",
			Replaces: []*rlsconfv3.RateLimitReplace{{Name: "a"}}}}, `descriptors[0].rate_limit.replaces[0].name: replaces "a"`},
		{"duplicate", &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "s"}, {Key: "s"}}},
			"xds:d: descriptors[0].descriptors[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := protoCompile(t, tt.desc)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile = %v, want a problem %q", err, tt.want)
			}
		})
	}
}

// TestDecodeProto reads the JSON and YAML forms of a RateLimitConfig.
func TestDecodeProto(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data string
		want       string // a problem; "" for none
	}{
		{"yaml snake_case", `
name: l
domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: MINUTE, requests_per_unit: 5}
    quota_mode: true
`, ""},
		{"json camelCase with @type", `{"@type": "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig",
 "name": "l", "domain": "d", "descriptors": [{"key": "k", "value": "v", "rateLimit": {"unit": "MINUTE", "requestsPerUnit": 5}}]}`, ""},
		{"unknown field", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: MINUTE}\n", "not a RateLimitConfig"},
		{"bad unit name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: FORTNIGHT, requests_per_unit: 1}\n", "not a RateLimitConfig"},
		{"other @type", `{"@type": "type.googleapis.com/x.Y", "domain": "d"}`, "want"},
		{"not yaml", "domain: [", "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, problems := DecodeProto("f.yaml", []byte(tt.data))
			if tt.want != "" {
				if len(problems) == 0 || !strings.Contains(problems[0].Error(), tt.want) {
					t.Fatalf("DecodeProto = %v, want a problem %q", problems, tt.want)
				}
				return
			}
			if len(problems) > 0 {
				t.Fatalf("DecodeProto = %v", problems)
			}
			set, err := Options{}.Compile([]*File{f})
			if err != nil {
				t.Fatalf("Compile = %v", err)
			}
			if ls := set.Domain("d").Match(entries("k", "v")); len(ls) != 1 || ls[0].RequestsPerUnit != 5 {
				t.Errorf("Match(k=v) = %v, want one limit of 5", ls)
			}
		})
	}
}
