package rules

import "testing"

// TestPatternMatch: '*' matches any run of characters, possibly empty, at
// any place in a value, and nothing else is special.
func TestPatternMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{"foo*", []string{"foo", "foobar", "foo*"}, []string{"fo", "xfoo", ""}},
		{"*bar", []string{"bar", "foobar", "*bar"}, []string{"bars", "ba", ""}},
		{"foo*bar", []string{"foobar", "foo-bar", "foobarbar"}, []string{"foobar-", "fooba", "foo", "bar", "fobar"}},
		{"foo*bar*baz", []string{"foobarbaz", "foo1bar2baz", "foobazbarbaz", "foobarbarbaz"}, []string{"foobaz", "foobarba", "foo-baz-bar", "barfoobaz"}},
		{"*", []string{"", "x", "*"}, nil},
		{"a**b", []string{"ab", "axxb"}, []string{"a", "ba"}},
		{"*a*", []string{"a", "xax", "aaa"}, []string{"", "b"}},
		{"ab*ba", []string{"aba" + "ba", "abba"}, []string{"aba"}}, // the ends may not overlap
	}
	for _, tt := range tests {
		p, err := parsePattern(tt.pattern)
		if err != nil {
			t.Fatalf("parsePattern(%q) = %v", tt.pattern, err)
		}
		for _, v := range tt.yes {
			if !p.match(v) {
				t.Errorf("%q does not match %q, want a match", tt.pattern, v)
			}
		}
		for _, v := range tt.no {
			if p.match(v) {
				t.Errorf("%q matches %q, want none", tt.pattern, v)
			}
		}
	}
	if _, err := parsePattern(`a\*`); err != errEscapedStar {
		t.Errorf(`parsePattern("a\*") = %v, want errEscapedStar`, err)
	}
	if a, b := mustPattern(t, "a**b*").canonical(), mustPattern(t, "a*b*").canonical(); a != b {
		t.Errorf("canonical forms %q and %q differ", a, b)
	}
}

func mustPattern(t *testing.T, v string) *pattern {
	t.Helper()
	p, err := parsePattern(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
