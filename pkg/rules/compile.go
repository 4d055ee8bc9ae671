package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// compile is Options.Compile with the zero Options.
func compile(files []*File) (*Set, error) { return Options{}.Compile(files) }

// Compile checks decoded files, from Decode or another decoder (FromProto
// for an xDS RateLimitConfig), and builds their Set with o: each file one
// domain, its limits resolved (inherited failure modes and algorithms,
// window sizes, rule names) into the match tree. It returns every problem
// of every file at once as an *Error. The Set keeps the files for
// MarshalJSON: callers must not modify them afterwards.
func (o Options) Compile(files []*File) (*Set, error) {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	b := newBuilder(o, names)
	for _, f := range files {
		b.add(f.Name, f, nil)
	}
	return b.done()
}

// builder compiles files one by one into a Set.
type builder struct {
	opts     Options
	set      *Set
	seen     map[string]Problem // domain -> where it was first defined
	problems []Problem
	limits   []*Limit // of the files added without problems, in file order
}

// newBuilder returns a builder of a Set from files, in order.
func newBuilder(o Options, files []string) *builder {
	return &builder{opts: o, set: &Set{domains: make(map[string]*Domain), files: files}, seen: make(map[string]Problem)}
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
	b.limits = append(b.limits, c.limits...)
	first, dup := b.seen[dom.Name]
	switch {
	case !dup:
		b.seen[dom.Name] = Problem{File: name, Line: f.at("domain")}
		b.set.domains[dom.Name] = dom
	case !b.opts.MergeDomains:
		b.problems = append(b.problems, Problem{File: name, Line: f.at("domain"), Field: "domain",
			Msg: fmt.Sprintf("domain %q is already defined in %s:%d", dom.Name, first.File, first.Line)})
	default:
		b.merge(b.set.domains[dom.Name], dom, f, first)
	}
}

// merge adds dom, compiled from f, to into, the domain of the same name
// that earlier files defined (first says where), as envoyproxy/ratelimit's
// MERGE_DOMAIN_CONFIG does: f's top-level descriptors join into's, after
// them (so its wildcards come later in order), and one that is already
// there is a duplicate, named with both files. The files must resolve the
// domain's failure_mode and algorithm alike, since a domain has one of each.
func (b *builder) merge(into, dom *Domain, f *File, first Problem) {
	fail := func(line int, field, format string, args ...any) {
		b.problems = append(b.problems, Problem{File: f.Name, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if dom.FailureMode != into.FailureMode {
		fail(f.at("failure_mode"), "failure_mode", "domain %q has failure_mode %s here and %s in %s: files merged into one domain must agree",
			dom.Name, dom.FailureMode, into.FailureMode, first.File)
	}
	if dom.OverLimit != into.OverLimit {
		fail(f.at("over_limit"), "over_limit", "domain %q has over_limit %s here and %s in %s: files merged into one domain must agree",
			dom.Name, dom.OverLimit, into.OverLimit, first.File)
	}
	if dom.Algorithm != into.Algorithm {
		fail(f.at("algorithm"), "algorithm", "domain %q has algorithm %s here and %s in %s: files merged into one domain must agree",
			dom.Name, dom.Algorithm, into.Algorithm, first.File)
	}
	for _, n := range dom.top {
		if dup := into.root.add(n); dup != nil {
			fail(n.line, n.field, "%s", duplicate(n, dup, f.Name))
			continue
		}
		into.top = append(into.top, n)
	}
	into.files = append(into.files, f)
}

func (b *builder) done() (*Set, error) {
	if len(b.problems) > 0 {
		return nil, &Error{Problems: b.problems}
	}
	for i, l := range b.limits {
		l.id = i
	}
	b.set.limits = b.limits
	return b.set, nil
}

// compiler checks one file and builds its domain, collecting every problem.
// It reports no problem of a value that Decode already reported (Pos.bad),
// and no missing field in a mapping that had an unknown one, which is
// likely that field misspelled: one mistake, one problem.
type compiler struct {
	file     string
	problems []Problem
	alg      window.Algorithm // the domain's algorithm
	algBad   bool             // the domain's algorithm had a problem
	limits   []*Limit         // compiled without problems, in file order
}

func (c *compiler) fail(line int, field, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: c.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// required reports a string field that is missing or empty.
func (c *compiler) required(p Pos, field, value string) {
	switch {
	case p.bad(field):
	case !p.given(field, value != ""):
		if !p.unknown {
			c.fail(p.Line, p.field(field), "missing")
		}
	case value == "":
		c.fail(p.at(field), p.field(field), "empty")
	}
}

// setting reports whether p's field is given with a value to check.
func setting(p Pos, field, value string) bool { return p.given(field, value != "") && !p.bad(field) }

// failureMode parses p's failure_mode; ok is false, and the problem
// reported, for an unknown one.
func (c *compiler) failureMode(p Pos, s string) (m FailureMode, ok bool) {
	if m, ok = parseFailureMode(s); !ok {
		c.fail(p.at("failure_mode"), p.field("failure_mode"), "unknown failure mode %q (want allow, deny or error)", s)
	}
	return m, ok
}

// overLimit parses p's over_limit; ok is false, and the problem reported,
// for an unknown one.
func (c *compiler) overLimit(p Pos, s string) (o OverLimit, ok bool) {
	if o, ok = parseOverLimit(s); !ok {
		c.fail(p.at("over_limit"), p.field("over_limit"), "unknown over_limit %q (want charge or refuse)", s)
	}
	return o, ok
}

// algorithm parses p's algorithm; ok is false, and the problem reported,
// for an unknown one.
func (c *compiler) algorithm(p Pos, s string) (a window.Algorithm, ok bool) {
	if a, ok = parseAlgorithm(s); !ok {
		c.fail(p.at("algorithm"), p.field("algorithm"), "unknown algorithm %q (want fixed_window, sliding_window, token_bucket or sliding_log)", s)
	}
	return a, ok
}

func (c *compiler) domain(f *File) *Domain {
	dom := &Domain{Name: f.Domain, FailureMode: FailError, OverLimit: OverLimitCharge, root: &node{}, files: []*File{f}}
	if setting(f.Pos, "failure_mode", f.FailureMode) {
		if m, ok := c.failureMode(f.Pos, f.FailureMode); ok {
			dom.FailureMode = m
		}
	}
	if setting(f.Pos, "algorithm", f.Algorithm) {
		var ok bool
		dom.Algorithm, ok = c.algorithm(f.Pos, f.Algorithm)
		c.algBad = !ok
	}
	if setting(f.Pos, "over_limit", f.OverLimit) {
		if o, ok := c.overLimit(f.Pos, f.OverLimit); ok {
			dom.OverLimit = o
		}
	}
	c.alg = dom.Algorithm
	c.required(f.Pos, "domain", f.Domain)
	for i := range f.Descriptors {
		if n := c.descriptor(&f.Descriptors[i], dom.root, nil, "", inherited{dom.FailureMode, dom.OverLimit}); n != nil {
			dom.top = append(dom.top, n)
		}
	}
	return dom
}

// inherited is what a descriptor's limits take from the nearest enclosing
// descriptor or domain that sets it.
type inherited struct {
	mode FailureMode
	over OverLimit
}

// descriptor compiles d and what is below it into a child of parent, and
// returns the child, or nil when it could not be filed there; steps, path
// and in are the parent's.
func (c *compiler) descriptor(d *Descriptor, parent *node, steps []step, path string, in inherited) *node {
	if setting(d.Pos, "failure_mode", d.FailureMode) {
		if m, ok := c.failureMode(d.Pos, d.FailureMode); ok {
			in.mode = m
		}
	}
	// The node's limits: its own over_limit, else a budget (quota_mode)
	// charges, else the inherited one. Its children inherit only what the
	// node sets itself, not what quota_mode implies.
	over := in.over
	if setting(d.Pos, "over_limit", d.OverLimit) {
		if o, ok := c.overLimit(d.Pos, d.OverLimit); ok {
			in.over, over = o, o
		}
	} else if d.QuotaMode {
		over = OverLimitCharge
	}
	c.required(d.Pos, "key", d.Key)
	fileable := d.Key != "" && !d.bad("value")
	limit := d.RateLimit != nil || d.bad("rate_limit")
	limits := d.given("rate_limits", len(d.RateLimits) > 0)
	if limit && limits {
		c.fail(d.at("rate_limits"), d.field("rate_limits"), "give rate_limit or rate_limits, not both")
	}
	n := &node{key: d.Key, value: d.Value, file: c.file, line: d.Line, field: d.Path}
	st := step{key: d.Key, value: d.Value, toMetric: d.ValueToMetric}
	if isPattern(d.Value) {
		p, err := parsePattern(d.Value)
		if err != nil {
			c.fail(d.at("value"), d.field("value"), "%s", err)
			fileable = false
		} else {
			n.wild, st.wildcard = p, true
		}
	}
	if d.ShareThreshold {
		if n.wild != nil {
			st.share = true
		} else if !isPattern(d.Value) {
			c.fail(d.at("share_threshold"), d.field("share_threshold"), "applies only to a wildcard value (one with a '*')")
		}
	}
	if len(d.Metadata) > 0 && !limit && !limits {
		c.fail(d.at("metadata"), d.field("metadata"), "applies to the descriptor's limits, and it has none")
	}
	// A copy per node: the limits below keep their own path.
	steps = append(steps[:len(steps):len(steps)], st)
	// The path names the node's limits in metrics and logs: "key_value.key2".
	step := d.Key
	if d.Value != "" {
		step += "_" + d.Value
	}
	if path != "" {
		step = path + "." + step
	}
	path = step
	meta := c.metadata(d)
	if d.RateLimit != nil {
		if l := c.limit(d.RateLimit, d, path, steps, in.mode, 0); l != nil {
			l.OverLimit = over
			l.Metadata = meta
			n.limits = append(n.limits, l)
		}
	}
	for i := range d.RateLimits {
		if l := c.limit(&d.RateLimits[i], d, path, steps, in.mode, i); l != nil {
			l.OverLimit = over
			l.Metadata = meta
			n.limits = append(n.limits, l)
		}
	}
	c.selfReplaces(d)
	for i := range d.Descriptors {
		c.descriptor(&d.Descriptors[i], n, steps, path, in)
	}
	if !fileable {
		return nil
	}
	if dup := parent.add(n); dup != nil {
		c.fail(d.at("value"), d.Path, "%s", duplicate(n, dup, c.file))
		return nil
	}
	return n
}

// selfReplaces reports a limit of d that replaces a limit of d itself, as
// envoyproxy/ratelimit does: a descriptor's limits always match together,
// so that limit would never apply.
func (c *compiler) selfReplaces(d *Descriptor) {
	rs := d.RateLimits
	if d.RateLimit != nil {
		rs = []RateLimit{*d.RateLimit}
	}
	for _, r := range rs {
		for _, rp := range r.Replaces {
			if rp.Name == "" {
				continue
			}
			for _, own := range rs {
				if own.Name == rp.Name {
					c.fail(rp.at("name"), rp.field("name"), "replaces %q, a limit of its own descriptor", rp.Name)
					break
				}
			}
		}
	}
}

// limit compiles r, the index-th limit of d, whose node has path and
// steps; it is nil if r has problems.
func (c *compiler) limit(r *RateLimit, d *Descriptor, path string, steps []step, mode FailureMode, index int) *Limit {
	before := len(c.problems)
	l := &Limit{Name: r.Name, Unlimited: r.Unlimited, Shadow: d.ShadowMode, QuotaMode: d.QuotaMode, FailureMode: mode,
		Algorithm: c.alg, DetailedMetric: d.DetailedMetric, Multiplier: 1, path: steps, index: index}
	for _, s := range steps {
		l.ValueToMetric = l.ValueToMetric || (s.dynamic() && !l.DetailedMetric)
	}
	if m := r.UnitMultiplier; m != nil {
		if *m == 0 {
			c.fail(r.at("unit_multiplier"), r.field("unit_multiplier"), "must be a positive whole number, got 0")
		}
		l.Multiplier = *m
	}
	for _, rp := range r.Replaces {
		switch {
		case rp.bad("name"), rp.unknown && rp.Name == "":
		case rp.Name == "":
			c.fail(rp.Line, rp.field("name"), "missing or empty")
		default:
			l.Replaces = append(l.Replaces, rp.Name)
		}
	}
	algKnown := !c.algBad && !r.bad("algorithm")
	if setting(r.Pos, "algorithm", r.Algorithm) {
		var ok bool
		l.Algorithm, ok = c.algorithm(r.Pos, r.Algorithm)
		algKnown = ok
	}
	c.window(r, l)
	if algKnown {
		c.algorithmLimits(r, l)
	}
	l.Path = path
	if index > 0 {
		l.Path = fmt.Sprintf("%s[%d]", path, index)
	}
	l.Rule = l.Path
	if l.Name != "" {
		l.Rule = l.Name
	}
	if len(c.problems) > before {
		return nil
	}
	c.limits = append(c.limits, l)
	return l
}

// window checks r's unit and requests_per_unit and sets l's window. An
// unlimited limit takes no unit, and ignores requests_per_unit, as
// envoyproxy/ratelimit does.
func (c *compiler) window(r *RateLimit, l *Limit) {
	unit := r.given("unit", r.Unit != "")
	if l.Unlimited {
		if unit {
			c.fail(r.at("unit"), r.field("unit"), "an unlimited limit takes no unit")
		}
		return
	}
	if unit && !r.bad("unit") {
		u, err := window.ParseUnit(r.Unit)
		if err != nil {
			c.fail(r.at("unit"), r.field("unit"), "%s", windowProblem(err))
		}
		l.Unit = u
	}
	if r.RequestsPerUnit != nil {
		l.RequestsPerUnit = *r.RequestsPerUnit
	}
	// Whether these belong is unknown when unlimited had a problem, and a
	// field may be missing only because it was misspelled.
	if !r.bad("unlimited") && !r.unknown {
		if !unit {
			c.fail(r.Line, r.field("unit"), "missing")
		}
		if !r.given("requests_per_unit", r.RequestsPerUnit != nil) {
			c.fail(r.Line, r.field("requests_per_unit"), "missing")
		}
	}
	if l.Unit != 0 {
		size, err := window.Size(l.Unit, uint64(l.Multiplier))
		if err != nil {
			c.fail(r.at("unit_multiplier"), r.field("unit_multiplier"), "window too long: %d %ss is more than %v", l.Multiplier, l.Unit, window.MaxSize)
		}
		l.Size = size
	}
}

// windowProblem is a package window error as a rules problem, without the
// sentinel's "window: bad window: " prefix, which tells someone editing a
// rules file nothing the field name does not.
func windowProblem(err error) string {
	return strings.TrimPrefix(err.Error(), window.ErrBadWindow.Error()+": ")
}
