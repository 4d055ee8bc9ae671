package rules

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func parseOne(t testing.TB, src string) (*Set, error) {
	t.Helper()
	return Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(src)})
}

func mustRules(t testing.TB, src string) *Set {
	t.Helper()
	r, err := parseOne(t, src)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return r
}

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: one\n")
	write("b.yml", "domain: two\n")
	write("notes.txt", "not rules")
	write(".hidden.yaml", "domain: [broken")
	r, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := strings.Join(r.Domains(), ","); got != "one,two" {
		t.Errorf("Domains = %q, want one,two", got)
	}
	write("c.yaml", "\n\ndomain: one\n")
	write("d.yaml", "domain: d\nbogus: 1\n")
	_, err = Load(dir)
	if err == nil {
		t.Fatal("Load with a duplicate domain succeeded")
	}
	for _, w := range []string{"c.yaml:3: domain: domain \"one\" is already defined in " + filepath.Join(dir, "a.yaml") + ":1", "d.yaml:2: bogus: unknown field"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Load(missing) = %v, want an error naming the path", err)
	}
}

// TestParseProblems: each bad file names file, line and field, and
// every problem of a file is reported, not only the first.
func TestParseProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string // each a Problem.Error() substring, in order
	}{
		{"unknown top-level field", "domain: d\ndescriptor: []\n", []string{`rules.yaml:2: descriptor: unknown field "descriptor"`}},
		{"missing domain", "descriptors: []\n", []string{"rules.yaml:1: domain: missing"}},
		{"empty domain", "domain: ''\n", []string{"rules.yaml:1: domain: empty"}},
		{"unknown unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			[]string{`rules.yaml:4: descriptors[0].rate_limit.unit: unknown unit "fortnight"`}},
		{"negative number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n",
			[]string{`rules.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "-5"`}},
		{"missing numbers", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: x\n",
			[]string{"rules.yaml:5: descriptors[0].rate_limit.unit: missing", "rules.yaml:5: descriptors[0].rate_limit.requests_per_unit: missing"}},
		{"zero multiplier", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n",
			[]string{"rules.yaml:4: descriptors[0].rate_limit.unit_multiplier: must be a positive whole number, got 0"}},
		{"window too long", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 1000}\n",
			[]string{"descriptors[0].rate_limit.unit_multiplier: window too long"}},
		{"neither limit nor children", "domain: d\ndescriptors:\n  - key: k\n    value: v\n",
			[]string{`rules.yaml:3: descriptors[0]: descriptor "k" has neither rate_limit nor descriptors`}},
		{"empty key", "domain: d\ndescriptors:\n  - key: ''\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"rules.yaml:3: descriptors[0].key: empty"}},
		{"duplicate sibling", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
			[]string{`rules.yaml:7: descriptors[1]: duplicate descriptor: key "k" value "v"`}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{"descriptors[0].rate_limit.unit: an unlimited limit takes no unit"}},
		{"both rate_limit and rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: minute, requests_per_unit: 1}]\n",
			[]string{"rules.yaml:5: descriptors[0].rate_limits: give rate_limit or rate_limits, not both"}},
		{"bad failure mode and algorithm", "domain: d\nfailure_mode: maybe\nalgorithm: leaky\n",
			[]string{`rules.yaml:2: failure_mode: unknown failure mode "maybe"`, `rules.yaml:3: algorithm: unknown algorithm "leaky"`}},
		{"field given twice", "domain: d\ndomain: e\n", []string{"rules.yaml:2: domain: field given twice"}},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{}]\n",
			[]string{"descriptors[0].rate_limit.replaces[0].name: missing or empty"}},
		{"not YAML", "domain: [\n", []string{"rules.yaml:1: not valid YAML"}},
		{"wrong shapes", "domain: d\ndescriptors: {key: k}\n", []string{"rules.yaml:2: descriptors: want a list, got a mapping"}},
		{"every problem, deep", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute, requests_per_unit: x}\n      - key: c\n        bogus: 1\n",
			[]string{`rules.yaml:4: descriptors[0].rate_limit.unit: unknown unit "sec"`, `rules.yaml:7: descriptors[0].descriptors[0].rate_limit.requests_per_unit`, `rules.yaml:9: descriptors[0].descriptors[1].bogus: unknown field "bogus"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseOne(t, tt.src)
			var re *Error
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, want a *Error", err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\nlacks %q", msg, w)
				}
			}
			if len(re.Problems) < len(tt.want) {
				t.Errorf("%d problems, want at least %d", len(re.Problems), len(tt.want))
			}
		})
	}
}

// FuzzParse: the parser never panics, and whatever it accepts is a
// well-formed tree that matching and JSON rendering can walk.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: 'v*'\n    descriptors:\n      - key: x\n        rate_limits: [{unit: day, requests_per_unit: 5, unit_multiplier: 3}]\n",
		"domain: d\nfailure_mode: deny\nalgorithm: sliding_window\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n",
		"domain: &a d\ndescriptors: [*a]\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: n}], name: m}\n",
		"", "---\n---\n", "[1, 2]", "domain: {a: b}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		r, err := parseOne(t, src)
		if err != nil {
			var re *Error
			if !errors.As(err, &re) || len(re.Problems) == 0 {
				t.Fatalf("error %v is not a *Error with problems", err)
			}
			return
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		for _, name := range r.Domains() {
			if name == "" {
				t.Fatal("accepted an empty domain")
			}
			walk(t, r.Domain(name).root)
		}
	})
}

func walk(t *testing.T, n *node) {
	for _, l := range n.limits {
		if l.FailureMode == failUnset {
			t.Fatalf("limit %q has no failure mode", l.Rule)
		}
		if !l.Unlimited && (l.Unit == 0 || l.Size <= 0 || l.Size > window.MaxSize || l.Multiplier == 0) {
			t.Fatalf("accepted limit %+v has no valid window", l)
		}
	}
	for _, c := range n.exact {
		walk(t, c)
	}
	for _, c := range n.wildcards {
		walk(t, c)
	}
	for _, c := range n.keyOnly {
		if c.key == "" {
			t.Fatal("accepted a descriptor with an empty key")
		}
		walk(t, c)
	}
}
