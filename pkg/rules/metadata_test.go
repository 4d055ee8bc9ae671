package rules

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestQuotaModeAndMetadata: quota_mode and metadata decode onto every
// limit of their descriptor: metadata of any YAML kind becomes the
// structpb value Envoy's dynamic_metadata carries, built once at load.
func TestQuotaModeAndMetadata(t *testing.T) {
	t.Parallel()
	d := mustRules(t, `
domain: d
descriptors:
  - key: k
    quota_mode: true
    metadata:
      team: payments
      tier: 2
      ratio: 0.5
      big: 9007199254740992
      enabled: true
      nothing: null
      tags: [a, 1, false, ~]
      nested: {when: 2026-01-22, list: [{x: y}]}
      anchored: &a {v: 1}
      aliased: *a
    rate_limits:
      - {unit: minute, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
`).Domain("d")
	want, err := structpb.NewStruct(map[string]any{
		"team": "payments", "tier": 2.0, "ratio": 0.5, "big": float64(1 << 53), "enabled": true, "nothing": nil,
		"tags":     []any{"a", 1.0, false, nil},
		"nested":   map[string]any{"when": "2026-01-22", "list": []any{map[string]any{"x": "y"}}},
		"anchored": map[string]any{"v": 1.0},
		"aliased":  map[string]any{"v": 1.0},
	})
	if err != nil {
		t.Fatal(err)
	}
	limits := d.Match(entries("k", "v"))
	if len(limits) != 2 {
		t.Fatalf("Match = %v, want 2 limits", limits)
	}
	for i, l := range limits {
		if !l.QuotaMode {
			t.Errorf("limit %d: QuotaMode = false, want true", i)
		}
		if !proto.Equal(l.Metadata, want) {
			t.Errorf("limit %d: Metadata = %v, want %v", i, l.Metadata, want)
		}
	}
	if limits[0].Metadata != limits[1].Metadata {
		t.Error("a descriptor's limits got two metadata structs, want one built once")
	}
	plain := d.Match(entries("plain", "v"))[0]
	if plain.QuotaMode || plain.Metadata != nil {
		t.Errorf("plain limit: QuotaMode %v, Metadata %v; want false, nil", plain.QuotaMode, plain.Metadata)
	}
}

// TestMetadataProblems: metadata that dynamic_metadata cannot carry, or
// that could carry nowhere, is a problem with file, line and field.
func TestMetadataProblems(t *testing.T) {
	t.Parallel()
	const head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	bomb := "    metadata:\n      a: &a [x, x, x, x, x, x, x, x, x, x]\n      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n      d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"not a mapping", head + "    metadata: [a]\n", "rules.yaml:5: descriptors[0].metadata: want a mapping, got a list"},
		{"not finite", head + "    metadata: {x: .nan}\n", `rules.yaml:5: descriptors[0].metadata.x: want a finite number, got ".nan"`},
		{"not exact", head + "    metadata: {x: 9007199254740993}\n", "rules.yaml:5: descriptors[0].metadata.x: whole number 9007199254740993 does not fit"},
		{"a key that is not a string", head + "    metadata: {[a]: 1}\n", "rules.yaml:5: descriptors[0].metadata: metadata keys must be strings, got a list"},
		{"a key given twice", head + "    metadata: {x: 1, x: 2}\n", "rules.yaml:5: descriptors[0].metadata.x: field given twice"},
		{"too many values through aliases", head + bomb, "metadata has more than 10000 values"},
		{"no limit to carry it", "domain: d\ndescriptors:\n  - key: k\n    metadata: {x: 1}\n", "rules.yaml:4: descriptors[0].metadata: applies to the descriptor's limits, and it has none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseOne(t, tt.src)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse = %v, want %q", err, tt.want)
			}
			if n := len(err.(*Error).Problems); n != 1 {
				t.Errorf("%d problems, want 1:\n%v", n, err)
			}
		})
	}
}
