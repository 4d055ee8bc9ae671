package rules

import (
	"errors"
	"strings"
)

// pattern is a compiled wildcard value: each '*' matches any run of
// characters, possibly empty, and every other character matches itself.
// It matches with string comparisons only, never allocating.
type pattern struct {
	prefix, suffix string   // the literal text before the first and after the last '*'
	middle         []string // the literal runs between stars, in order; none empty
}

// errEscapedStar is the one form of wildcard value that is refused:
// there is no escape, so a value cannot match a literal '*', and a
// backslash before a star most likely means one was intended.
var errEscapedStar = errors.New(`'\*' does not escape '*': every '*' in a value is a wildcard, and a value cannot match a literal '*'`)

// isPattern reports whether a descriptor value is a wildcard pattern.
func isPattern(value string) bool { return strings.IndexByte(value, '*') >= 0 }

// parsePattern compiles a value that holds at least one '*'. Runs of stars
// mean what one star means.
func parsePattern(value string) (*pattern, error) {
	if strings.Contains(value, `\*`) {
		return nil, errEscapedStar
	}
	parts := strings.Split(value, "*")
	p := &pattern{prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, m := range parts[1 : len(parts)-1] {
		if m != "" {
			p.middle = append(p.middle, m)
		}
	}
	return p, nil
}

// canonical is the pattern written with single stars: two values with the
// same canonical form match the same values.
func (p *pattern) canonical() string {
	var b strings.Builder
	b.WriteString(p.prefix)
	b.WriteByte('*')
	for _, m := range p.middle {
		b.WriteString(m)
		b.WriteByte('*')
	}
	b.WriteString(p.suffix)
	return b.String()
}

// match reports whether s is one of the values p matches. With the
// literal ends fixed, taking each middle run at its leftmost place leaves
// the most room for the runs after it, so no backtracking is needed.
func (p *pattern) match(s string) bool {
	if len(s) < len(p.prefix)+len(p.suffix) || !strings.HasPrefix(s, p.prefix) || !strings.HasSuffix(s, p.suffix) {
		return false
	}
	s = s[len(p.prefix) : len(s)-len(p.suffix)]
	for _, m := range p.middle {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}
