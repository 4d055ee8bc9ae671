package rules

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func parseOne(t testing.TB, src string) (*Set, error) {
	t.Helper()
	return Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(src)})
}

// parseError parses src as rules.yaml and fails t unless it is refused
// with an *Error.
func parseError(t testing.TB, src string) *Error {
	t.Helper()
	_, err := parseOne(t, src)
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("Parse = %v, want a *Error", err)
	}
	return re
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
		{"replaces its own name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: own\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: other}, {name: own}]\n",
			[]string{`rules.yaml:8: descriptors[0].rate_limit.replaces[1].name: replaces "own", a limit of its own descriptor`}},
		{"replaces a sibling of rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: a, unit: second, requests_per_unit: 1}\n      - {unit: minute, requests_per_unit: 9, replaces: [{name: a}]}\n",
			[]string{`rules.yaml:6: descriptors[0].rate_limits[1].replaces[0].name: replaces "a", a limit of its own descriptor`}},
		{"escaped star", "domain: d\ndescriptors:\n  - key: k\n    value: 'a\\*'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`rules.yaml:4: descriptors[0].value: '\*' does not escape '*'`}},
		{"share_threshold on an exact value", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"rules.yaml:5: descriptors[0].share_threshold: applies only to a wildcard value (one with a '*')"}},
		{"share_threshold on a key only", "domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"rules.yaml:4: descriptors[0].share_threshold: applies only to a wildcard value"}},
		{"duplicate wildcard, however many stars", "domain: d\ndescriptors:\n  - key: k\n    value: 'a*b'\n  - key: k\n    value: 'a**b'\n",
			[]string{`rules.yaml:6: descriptors[1]: duplicate descriptor: key "k" value "a*b" is already defined at this level, at line 3`}},
		{"not YAML", "domain: [\n", []string{"rules.yaml:1: not valid YAML"}},
		{"wrong shapes", "domain: d\ndescriptors: {key: k}\n", []string{"rules.yaml:2: descriptors: want a list, got a mapping"}},
		{"every problem, deep", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute, requests_per_unit: x}\n      - key: c\n        bogus: 1\n",
			[]string{`rules.yaml:4: descriptors[0].rate_limit.unit: unknown unit "sec"`, `rules.yaml:7: descriptors[0].descriptors[0].rate_limit.requests_per_unit`, `rules.yaml:9: descriptors[0].descriptors[1].bogus: unknown field "bogus"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			re := parseError(t, tt.src)
			if !errors.Is(re, ErrInvalid) {
				t.Fatalf("Parse = %v, want it to wrap ErrInvalid", re)
			}
			msg := re.Error()
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

// TestOneProblemOnce: one mistake is one problem, not a first one and its
// knock-on effects: a misspelled field is unknown, not also a missing one;
// a value of the wrong kind is reported once, not also as empty or unknown.
func TestOneProblemOnce(t *testing.T) {
	t.Parallel()
	const d = "domain: d\ndescriptors:\n"
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"misspelled rate_limit", d + "  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n", `rules.yaml:4: descriptors[0].rate_limt: unknown field "rate_limt"`},
		{"misspelled key", d + "  - kye: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", `rules.yaml:3: descriptors[0].kye: unknown field "kye"`},
		{"misspelled unit", d + "  - key: k\n    rate_limit: {unti: second, requests_per_unit: 1}\n", `rules.yaml:4: descriptors[0].rate_limit.unti: unknown field "unti"`},
		{"misspelled domain", "domian: d\n", `rules.yaml:1: domian: unknown field "domian"`},
		{"empty replaces item", d + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: ['']}\n", `rules.yaml:4: descriptors[0].rate_limit.replaces[0]: want a mapping, got ""`},
		{"null replaces item", d + "  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        -\n", "rules.yaml:8: descriptors[0].rate_limit.replaces[0]: want a mapping, got nothing"},
		{"null replaces name", d + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ~}]}\n", "rules.yaml:4: descriptors[0].rate_limit.replaces[0].name: want a string, got nothing"},
		{"misspelled replaces name", d + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nmae: x}]}\n", `rules.yaml:4: descriptors[0].rate_limit.replaces[0].nmae: unknown field "nmae"`},
		{"empty replaces name", d + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "rules.yaml:4: descriptors[0].rate_limit.replaces[0].name: missing or empty"},
		{"null domain", "domain: ~\n", "rules.yaml:1: domain: want a string, got nothing"},
		{"failure mode of the wrong kind", "domain: d\nfailure_mode: [deny]\n", "rules.yaml:2: failure_mode: want a string, got a list"},
		{"unit of the wrong kind", d + "  - key: k\n    rate_limit: {unit: [second], requests_per_unit: 1}\n", "rules.yaml:4: descriptors[0].rate_limit.unit: want a string, got a list"},
		{"unlimited of the wrong kind", d + "  - key: k\n    rate_limit: {unlimited: yes please}\n", `rules.yaml:4: descriptors[0].rate_limit.unlimited: want true or false, got "yes please"`},
		{"unlimited with a bad unit", d + "  - key: k\n    rate_limit: {unlimited: true, unit: fortnight}\n", "rules.yaml:4: descriptors[0].rate_limit.unit: an unlimited limit takes no unit"},
		{"key of the wrong kind", d + "  - key: [k]\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: ''\n    value: x\n", "rules.yaml:3: descriptors[0].key: want a string, got a list"},
		{"bad pattern with share_threshold", d + "  - key: k\n    value: 'x\\*'\n    share_threshold: true\n", `rules.yaml:4: descriptors[0].value: '\*' does not escape '*'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			re := parseError(t, tt.src)
			if len(re.Problems) == 0 || !strings.Contains(re.Problems[0].Error(), tt.want) {
				t.Errorf("first problem of\n%v\nis not %q", re, tt.want)
			}
			// The key case has a second, real problem: an empty key.
			if want := 1 + strings.Count(tt.src, "key: ''"); len(re.Problems) != want {
				t.Errorf("%d problems, want %d:\n%v", len(re.Problems), want, re)
			}
		})
	}
}

// TestLoadsAsReference: files that envoyproxy/ratelimit loads, load:
// descriptors without limits or children (whitelisted values), null lists
// and limits, and unlimited limits that keep a requests_per_unit.
func TestLoadsAsReference(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		// a request's entries and whether it gets a limit
		entries []string
		limited bool
	}{
		{"whitelisted value", "domain: d\ndescriptors:\n  - key: database\n    value: users\n", []string{"database", "users"}, false},
		{"null descriptors at the top", "domain: d\ndescriptors:\n", []string{"k", "v"}, false},
		{"empty descriptors at the top", "domain: d\ndescriptors: []\n", []string{"k", "v"}, false},
		{"null nested descriptors", "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{"k", "v"}, true},
		{"null nested descriptors alone", "domain: d\ndescriptors:\n  - key: k\n    descriptors: ~\n", []string{"k", "v"}, false},
		{"null rate_limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n", []string{"k", "v"}, false},
		{"null replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: ~}\n", []string{"k", "v"}, true},
		{"unlimited with requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 100}\n", []string{"k", "v"}, true},
		{"quota_mode without a limit", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n", []string{"k", "v"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, err := parseOne(t, tt.src)
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			limits := set.Domain("d").Match(entries(tt.entries...))
			if got := len(limits) > 0; got != tt.limited {
				t.Errorf("Match(%v) = %v, want a limit: %v", tt.entries, limits, tt.limited)
			}
			for _, l := range limits {
				if l.Unlimited && (l.RequestsPerUnit != 0 || l.Unit != 0) {
					t.Errorf("unlimited limit = %+v, want no window", l)
				}
			}
		})
	}
}

// TestMergeDomains: with MergeDomains, files of one domain merge into one
// tree (later files' wildcards after earlier ones'); a descriptor two files
// define at the same level is an error naming both files and lines, and so
// is a disagreement on the domain's defaults. Without it a second file of
// a domain is an error, as before.
func TestMergeDomains(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{
		"a.yaml":    []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1, name: a_user}\n  - key: path\n    value: '/a*'\n    rate_limit: {unit: minute, requests_per_unit: 2, name: a_path}\n"),
		"b.yaml":    []byte("domain: d\ndescriptors:\n  - key: user\n    value: bob\n    rate_limit: {unit: minute, requests_per_unit: 3, name: b_bob}\n  - key: path\n    value: '/*'\n    rate_limit: {unit: minute, requests_per_unit: 4, name: b_path}\n"),
		"c.yaml":    []byte("domain: other\n"),
		"dup.yaml":  []byte("domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 6}\n  - key: path\n    value: '/a**'\n"),
		"deny.yaml": []byte("domain: d\nfailure_mode: deny\n"),
	}
	merge := Options{MergeDomains: true}
	set, err := merge.Parse([]string{"a.yaml", "b.yaml", "c.yaml"}, files)
	if err != nil {
		t.Fatalf("Parse with MergeDomains = %v", err)
	}
	d := set.Domain("d")
	for _, tt := range []struct{ key, value, want string }{
		{"user", "alice", "a_user"}, {"user", "bob", "b_bob"}, {"path", "/abc", "a_path"}, {"path", "/xyz", "b_path"},
	} {
		if got := matchName(d, entries(tt.key, tt.value)); got != tt.want {
			t.Errorf("merged Match(%s=%s) = %q, want %q", tt.key, tt.value, got, tt.want)
		}
	}
	js, err := json.Marshal(set)
	if err != nil || strings.Count(string(js), `"domain":"d"`) != 2 {
		t.Errorf("MarshalJSON = %s, %v; want both files of domain d", js, err)
	}

	problems := []struct {
		name  string
		opts  Options
		files []string
		want  []string
	}{
		{"duplicates across files", merge, []string{"a.yaml", "b.yaml", "dup.yaml"}, []string{
			`dup.yaml:5: descriptors[1]: duplicate descriptor: key "user" without value is already defined at this level, at a.yaml:3`,
			`dup.yaml:7: descriptors[2]: duplicate descriptor: key "path" value "/a*" is already defined at this level, at a.yaml:5`,
		}},
		{"defaults disagree", merge, []string{"a.yaml", "deny.yaml"}, []string{
			`deny.yaml:2: failure_mode: domain "d" has failure_mode deny here and error in a.yaml: files merged into one domain must agree`,
		}},
		{"without the option", Options{}, []string{"a.yaml", "b.yaml"}, []string{`b.yaml:1: domain: domain "d" is already defined in a.yaml:1`}},
	}
	for _, tt := range problems {
		_, err := tt.opts.Parse(tt.files, files)
		var re *Error
		if !errors.As(err, &re) || len(re.Problems) != len(tt.want) {
			t.Errorf("%s: Parse = %v, want %d problems", tt.name, err, len(tt.want))
			continue
		}
		for i, w := range tt.want {
			if got := re.Problems[i].Error(); got != w {
				t.Errorf("%s: problem %d = %q, want %q", tt.name, i, got, w)
			}
		}
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
		"domain: d\nalgorithm: token_bucket\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, burst: 3}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limits: [{unit: minute, requests_per_unit: 100, algorithm: sliding_log}, {unit: hour, requests_per_unit: 1000000, algorithm: token_bucket, burst: 4294967295}]\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, unit_multiplier: 200, requests_per_unit: 1, algorithm: token_bucket, burst: 0}\n",
		"domain: d\nalgorithm: sliding_log\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10001, burst: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket, burst: 5}\n",
		"", "---\n---\n", "[1, 2]", "domain: {a: b}",
		"domain: d\ndescriptors:\n  - key: k\n    value: 'a*b*c'\n    share_threshold: true\n    value_to_metric: true\n    descriptors:\n      - key: x\n        rate_limit: {unit: day, requests_per_unit: 5}\n  - key: w\n",
		"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    metadata: {a: [1, 2.5, true, ~, {b: c}]}\n    rate_limit: {unlimited: true, requests_per_unit: 3}\n    descriptors:\n",
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
			walk(t, r.Domain(name).root, 0)
		}
	})
}

func walk(t *testing.T, n *node, depth int) {
	if isPattern(n.value) != (n.wild != nil) {
		t.Fatalf("node %q=%q: wildcard %v", n.key, n.value, n.wild)
	}
	for _, l := range n.limits {
		if l.FailureMode == failUnset {
			t.Fatalf("limit %q has no failure mode", l.Rule)
		}
		if len(l.path) != depth || l.path[depth-1].key != n.key || l.path[depth-1].value != n.value {
			t.Fatalf("limit %q has path %+v at depth %d", l.Rule, l.path, depth)
		}
		if !l.Unlimited && (l.Unit == 0 || l.Size <= 0 || l.Size > window.MaxSize || l.Multiplier == 0) {
			t.Fatalf("accepted limit %+v has no valid window", l)
		}
		checkAlgorithm(t, l)
	}
	for _, c := range n.exact {
		walk(t, c, depth+1)
	}
	for _, c := range n.wildcards {
		walk(t, c, depth+1)
	}
	for _, c := range n.keyOnly {
		if c.key == "" {
			t.Fatal("accepted a descriptor with an empty key")
		}
		walk(t, c, depth+1)
	}
}

// checkAlgorithm fails t unless l's algorithm settings are within the
// bounds compile promises.
func checkAlgorithm(t *testing.T, l *Limit) {
	t.Helper()
	// A bucket's burst is set, even on a requests_per_unit of 0 (which
	// admits nothing whatever it is); no other limit has one.
	if bucket := l.Algorithm == window.TokenBucket && !l.Unlimited; (l.Burst != 0 && !bucket) || (l.Burst == 0 && bucket && l.RequestsPerUnit > 0) {
		t.Fatalf("accepted limit %q: burst %d with algorithm %v", l.Rule, l.Burst, l.Algorithm)
	}
	r := window.Counter{Limit: uint64(l.RequestsPerUnit), Size: l.Size, Burst: uint64(l.Burst), Algorithm: l.Algorithm}
	switch {
	case l.Unlimited:
	case l.Algorithm == window.TokenBucket && l.RequestsPerUnit > 0 && (r.Interval() < time.Microsecond || uint64(l.Burst) > uint64(window.MaxBucketSpan)/uint64(r.Interval())):
		t.Fatalf("accepted bucket %q: interval %v, burst %d", l.Rule, r.Interval(), l.Burst)
	case l.Algorithm == window.SlidingLog && l.RequestsPerUnit > MaxSlidingLogLimit:
		t.Fatalf("accepted log %q of %d", l.Rule, l.RequestsPerUnit)
	}
}
