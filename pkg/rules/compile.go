package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// Compile checks decoded files and builds their Set: each file one domain,
// its limits resolved (inherited failure modes and algorithms, window
// sizes, rule names) into the match tree. It returns every problem of every
// file at once as an *Error. The Set keeps the files for MarshalJSON:
// callers must not modify them afterwards.
func Compile(files []*File) (*Set, error) {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	b := newBuilder(names)
	for _, f := range files {
		b.add(f.Name, f, nil)
	}
	return b.done()
}

// builder compiles files one by one into a Set.
type builder struct {
	set      *Set
	seen     map[string]Problem // domain -> where it was defined
	problems []Problem
}

// newBuilder returns a builder of a Set from files, in order.
func newBuilder(files []string) *builder {
	return &builder{set: &Set{domains: make(map[string]*Domain), files: files}, seen: make(map[string]Problem)}
}

// add compiles f, named name, whose decoding found decoded; f is nil when
// there was nothing to decode. A file with problems adds none of its
// domain.
func (b *builder) add(name string, f *File, decoded []Problem) {
	c := &compiler{file: name, problems: decoded}
	var dom *Domain
	if f != nil {
		dom = c.domain(f)
	}
	// Problems in line order, whichever step found them.
	slices.SortStableFunc(c.problems, func(x, y Problem) int { return cmp.Compare(x.Line, y.Line) })
	b.problems = append(b.problems, c.problems...)
	if dom == nil || len(c.problems) > 0 {
		return
	}
	if first, dup := b.seen[dom.Name]; dup {
		b.problems = append(b.problems, Problem{File: name, Line: f.at("domain"), Field: "domain",
			Msg: fmt.Sprintf("domain %q is already defined in %s:%d", dom.Name, first.File, first.Line)})
		return
	}
	b.seen[dom.Name] = Problem{File: name, Line: f.at("domain")}
	b.set.domains[dom.Name] = dom
}

func (b *builder) done() (*Set, error) {
	if len(b.problems) > 0 {
		return nil, &Error{Problems: b.problems}
	}
	return b.set, nil
}

// compiler checks one file and builds its domain, collecting every problem.
type compiler struct {
	file     string
	problems []Problem
	alg      window.Algorithm // the domain's algorithm
}

func (c *compiler) fail(line int, field, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: c.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// required reports a string field that is missing or empty.
func (c *compiler) required(p Pos, field, value string) {
	if !p.given(field, value != "") {
		c.fail(p.Line, p.field(field), "missing")
	} else if value == "" {
		c.fail(p.at(field), p.field(field), "empty")
	}
}

// failureMode parses p's failure_mode; ok is false, and the problem
// reported, for an unknown one.
func (c *compiler) failureMode(p Pos, s string) (m FailureMode, ok bool) {
	if m, ok = parseFailureMode(s); !ok {
		c.fail(p.at("failure_mode"), p.field("failure_mode"), "unknown failure mode %q (want allow, deny or error)", s)
	}
	return m, ok
}

// algorithm parses p's algorithm, reporting an unknown one.
func (c *compiler) algorithm(p Pos, s string) window.Algorithm {
	a, ok := parseAlgorithm(s)
	if !ok {
		c.fail(p.at("algorithm"), p.field("algorithm"), "unknown algorithm %q (want fixed_window or sliding_window)", s)
	}
	return a
}

func (c *compiler) domain(f *File) *Domain {
	dom := &Domain{Name: f.Domain, FailureMode: FailError, root: &node{}, file: f}
	if f.given("failure_mode", f.FailureMode != "") {
		if m, ok := c.failureMode(f.Pos, f.FailureMode); ok {
			dom.FailureMode = m
		}
	}
	if f.given("algorithm", f.Algorithm != "") {
		dom.Algorithm = c.algorithm(f.Pos, f.Algorithm)
	}
	c.alg = dom.Algorithm
	c.required(f.Pos, "domain", f.Domain)
	for i := range f.Descriptors {
		c.descriptor(&f.Descriptors[i], dom.root, "", dom.FailureMode)
	}
	return dom
}

// descriptor compiles d and what is below it into a child of parent; path
// and mode are the parent's.
func (c *compiler) descriptor(d *Descriptor, parent *node, path string, mode FailureMode) {
	if d.given("failure_mode", d.FailureMode != "") {
		if m, ok := c.failureMode(d.Pos, d.FailureMode); ok {
			mode = m
		}
	}
	c.required(d.Pos, "key", d.Key)
	limit := d.given("rate_limit", d.RateLimit != nil)
	limits := d.given("rate_limits", len(d.RateLimits) > 0)
	if !limit && !limits && !d.given("descriptors", len(d.Descriptors) > 0) {
		c.fail(d.Line, d.Path, "descriptor %q has neither rate_limit nor descriptors", d.Key)
	}
	if limit && limits {
		c.fail(d.at("rate_limits"), d.field("rate_limits"), "give rate_limit or rate_limits, not both")
	}
	n := &node{key: d.Key, value: d.Value}
	// The path names the node's limits in metrics and logs: "key_value.key2".
	step := d.Key
	if d.Value != "" {
		step += "_" + d.Value
	}
	if path != "" {
		step = path + "." + step
	}
	path = step
	if d.RateLimit != nil {
		if l := c.limit(d.RateLimit, d, path, mode, 0); l != nil {
			n.limits = append(n.limits, l)
		}
	}
	for i := range d.RateLimits {
		if l := c.limit(&d.RateLimits[i], d, path, mode, i); l != nil {
			n.limits = append(n.limits, l)
		}
	}
	for i := range d.Descriptors {
		c.descriptor(&d.Descriptors[i], n, path, mode)
	}
	if d.Key == "" {
		return
	}
	if err := parent.add(n); err != nil {
		c.fail(d.at("value"), d.Path, "%s", err)
	}
}

// limit compiles r, the index-th limit of d, whose node has path; it is nil
// if r has problems.
func (c *compiler) limit(r *RateLimit, d *Descriptor, path string, mode FailureMode, index int) *Limit {
	before := len(c.problems)
	l := &Limit{Name: r.Name, Unlimited: r.Unlimited, Shadow: d.ShadowMode, FailureMode: mode,
		Algorithm: c.alg, DetailedMetric: d.DetailedMetric, Multiplier: 1}
	if r.RequestsPerUnit != nil {
		l.RequestsPerUnit = *r.RequestsPerUnit
	}
	unit := r.given("unit", r.Unit != "")
	if unit {
		u, err := window.ParseUnit(r.Unit)
		if err != nil {
			c.fail(r.at("unit"), r.field("unit"), "%s", windowProblem(err))
		}
		l.Unit = u
	}
	if m := r.UnitMultiplier; m != nil {
		if *m == 0 {
			c.fail(r.at("unit_multiplier"), r.field("unit_multiplier"), "must be a positive whole number, got 0")
		}
		l.Multiplier = *m
	}
	for _, rp := range r.Replaces {
		if rp.Name == "" {
			c.fail(rp.Line, rp.field("name"), "missing or empty")
			continue
		}
		l.Replaces = append(l.Replaces, rp.Name)
	}
	if r.given("algorithm", r.Algorithm != "") {
		l.Algorithm = c.algorithm(r.Pos, r.Algorithm)
	}
	rpu := r.given("requests_per_unit", r.RequestsPerUnit != nil)
	switch {
	case l.Unlimited:
		if unit {
			c.fail(r.at("unit"), r.field("unit"), "an unlimited limit takes no unit")
		}
		if rpu {
			c.fail(r.at("requests_per_unit"), r.field("requests_per_unit"), "an unlimited limit takes no requests_per_unit")
		}
	default:
		if !unit {
			c.fail(r.Line, r.field("unit"), "missing")
		}
		if !rpu {
			c.fail(r.Line, r.field("requests_per_unit"), "missing")
		}
		if l.Unit != 0 {
			size, err := window.Size(l.Unit, uint64(l.Multiplier))
			if err != nil {
				c.fail(r.at("unit_multiplier"), r.field("unit_multiplier"), "window too long: %d %ss is more than %v", l.Multiplier, l.Unit, window.MaxSize)
			}
			l.Size = size
		}
	}
	l.Rule = path
	if l.Name != "" {
		l.Rule = l.Name
	} else if index > 0 {
		l.Rule = fmt.Sprintf("%s[%d]", path, index)
	}
	l.pb = l.Proto()
	if len(c.problems) > before {
		return nil
	}
	return l
}

// windowProblem is a package window error as a rules problem, without the
// sentinel's "window: bad window: " prefix, which tells someone editing a
// rules file nothing the field name does not.
func windowProblem(err error) string {
	return strings.TrimPrefix(err.Error(), window.ErrBadWindow.Error()+": ")
}
