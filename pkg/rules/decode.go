package rules

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"gopkg.in/yaml.v3"
)

// File is one rules file as decoded: one domain and its descriptor tree, as
// written, with where each value was written. Decode builds it from YAML;
// any other source of envoyproxy/ratelimit's configuration (such as an xDS
// RateLimitConfig, FromProto) can build it too and leave lines zero.
// Options.Compile checks it and builds the match tree. Its JSON is the
// rules as GET /rules shows them.
type File struct {
	Domain string `json:"domain"`
	// Name is the file's path, as given to Decode, or the source of
	// another decoder's File, such as "xds:<resource name>".
	Name string `json:"file"`
	// FailureMode ("error", "allow" or "deny") is the default of the
	// domain's limits; "" is error.
	FailureMode string `json:"failure_mode,omitempty"`
	// Algorithm ("fixed_window", "sliding_window", "token_bucket" or
	// "sliding_log", in any case) is the default of the domain's limits;
	// "" is fixed_window.
	Algorithm string `json:"algorithm,omitempty"`
	// OverLimit ("charge" or "refuse") is the default of the domain's
	// limits; "" is charge (see OverLimit).
	OverLimit   string       `json:"over_limit,omitempty"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`
	Pos         `json:"-"`
}

// Descriptor is one node of a domain's descriptor tree as decoded. A node
// needs a key; one with neither a rate limit nor children matches and
// applies no limit, which whitelists its value, as in envoyproxy/ratelimit.
type Descriptor struct {
	Key string `json:"key"`
	// Value is "" to match any value of Key; with a '*' it is a wildcard
	// pattern, each '*' matching any run of characters, possibly empty
	// ("foo*", "*bar", "foo*bar*baz"); else it is matched exactly.
	Value string `json:"value,omitempty"`
	// RateLimit and RateLimits are the node's limits: one, or several
	// counted together; a node has one of them at most.
	RateLimit      *RateLimit  `json:"rate_limit,omitempty"`
	RateLimits     []RateLimit `json:"rate_limits,omitempty"`
	ShadowMode     bool        `json:"shadow_mode,omitempty"`
	DetailedMetric bool        `json:"detailed_metric,omitempty"`
	// ValueToMetric puts the request's value of Key in the metric label of
	// the limits at or below the node, where the value is not written
	// (see Limit.ValueToMetric).
	ValueToMetric bool `json:"value_to_metric,omitempty"`
	// ShareThreshold, on a wildcard, makes every value it matches count on
	// one counter, keyed by the pattern.
	ShareThreshold bool `json:"share_threshold,omitempty"`
	// QuotaMode is the node's limits' quota_mode (see Limit.QuotaMode).
	QuotaMode bool `json:"quota_mode,omitempty"`
	// Metadata is the node's metadata as decoded: a mapping whose values
	// are map[string]any, []any, string, float64, bool or nil.
	Metadata map[string]any `json:"metadata,omitempty"`
	// FailureMode, when set, applies to the node's limits and those below
	// it; "" inherits.
	FailureMode string `json:"failure_mode,omitempty"`
	// OverLimit, when set, applies to the node's limits and those below it;
	// "" inherits, except that quota_mode makes the node's limits charge.
	OverLimit   string       `json:"over_limit,omitempty"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`
	Pos         `json:"-"`
}

// RateLimit is one limit of a descriptor as decoded. A nil number was not
// given.
type RateLimit struct {
	RequestsPerUnit *uint32 `json:"requests_per_unit,omitempty"`
	// Unit is a window.Unit by name, in any case ("second" ... "year").
	Unit string `json:"unit,omitempty"`
	// UnitMultiplier makes the window that many Units long; nil is 1.
	UnitMultiplier *uint32 `json:"unit_multiplier,omitempty"`
	// Unlimited counts nothing and answers OK; it takes no Unit or
	// RequestsPerUnit.
	Unlimited bool   `json:"unlimited,omitempty"`
	Name      string `json:"name,omitempty"`
	// Replaces names the limits this one removes when both match one
	// request.
	Replaces []Replace `json:"replaces,omitempty"`
	// Algorithm overrides the domain's; "" inherits it.
	Algorithm string `json:"algorithm,omitempty"`
	// Burst is, for a token_bucket limit, the most hits its full bucket
	// admits at once; nil is RequestsPerUnit. Other algorithms take none.
	Burst *uint32 `json:"burst,omitempty"`
	Pos   `json:"-"`
}

// Replace names a limit that a RateLimit replaces.
type Replace struct {
	Name string `json:"name"`
	Pos  `json:"-"`
}

// Pos is where a decoded value was written, for problems to name. Its zero
// value knows nothing: problems then carry no line, and a field counts as
// given only when its value is not zero.
type Pos struct {
	// Path names the value as problems do: "descriptors[0].rate_limit".
	Path string
	// Line is the line of the value, 1-based; 0 when unknown.
	Line int
	// Lines holds, for each field given, the line of its value, by its
	// YAML name; a field is given when it is here, even if its value had
	// a problem.
	Lines map[string]int

	// Set by Decode, so that compile reports no knock-on problem of one
	// that Decode reported: failed holds the fields whose values had a
	// problem, and unknown is set when the mapping had an unknown field,
	// which may be a required field misspelled.
	failed  map[string]bool
	unknown bool
}

// at returns the line of field's value, else of the value that holds it.
func (p Pos) at(field string) int {
	if l, ok := p.Lines[field]; ok {
		return l
	}
	return p.Line
}

// bad reports whether Decode found a problem in field's value.
func (p Pos) bad(field string) bool { return p.failed[field] }

// field returns the path of one of the value's fields.
func (p Pos) field(name string) string { return join(p.Path, name) }

// given reports whether field was written: set to a value other than zero,
// or recorded in Lines.
func (p Pos) given(field string, set bool) bool {
	_, ok := p.Lines[field]
	return set || ok
}

// Decode decodes one rules file from YAML, strictly: every problem of form
// (not YAML, unknown or repeated fields, values of the wrong kind) is
// reported with its line, and everything else is still decoded, so that
// compile can report its own problems of the same file. The File is nil
// when there is nothing to decode.
func Decode(name string, data []byte) (*File, []Problem) {
	d := &decoder{file: name}
	return d.decode(data), d.problems
}

// decoder walks one file's YAML nodes, collecting every problem with its
// line instead of stopping at the first.
type decoder struct {
	file     string
	problems []Problem
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) decode(data []byte) *File {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		d.problems = append(d.problems, Problem{File: d.file, Line: yamlErrorLine(err), Msg: "not valid YAML: " + err.Error()})
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.fail(&extra, "", "more than one YAML document; a rules file holds one domain")
	}
	if len(doc.Content) == 0 {
		d.fail(&doc, "", "empty file")
		return nil
	}
	f := &File{Name: d.file, Pos: Pos{Line: doc.Content[0].Line}}
	d.fields(doc.Content[0], &f.Pos, func(key string, v *yaml.Node) bool {
		switch key {
		case "domain":
			f.Domain = d.str(v, key)
		case "descriptors":
			f.Descriptors = d.descriptors(v, key)
		case "failure_mode":
			f.FailureMode = d.name(v, key)
		case "algorithm":
			f.Algorithm = d.name(v, key)
		case "over_limit":
			f.OverLimit = d.name(v, key)
		default:
			return false
		}
		return true
	})
	return f
}

// descriptors decodes a list of descriptors; items that are not mappings
// are reported and left out. Null is an empty list, as in
// envoyproxy/ratelimit.
func (d *decoder) descriptors(n *yaml.Node, where string) []Descriptor {
	var out []Descriptor
	for i, item := range d.nullableList(n, where) {
		item = deref(item)
		ds := Descriptor{Pos: Pos{Path: fmt.Sprintf("%s[%d]", where, i), Line: item.Line}}
		if d.fields(item, &ds.Pos, func(key string, v *yaml.Node) bool {
			f := ds.field(key)
			switch key {
			case "key":
				ds.Key = d.str(v, f)
			case "value":
				ds.Value = d.str(v, f)
			case "rate_limit":
				if !isNull(v) { // null: absent, as in envoyproxy/ratelimit
					ds.RateLimit = d.rateLimit(v, f)
				}
			case "rate_limits":
				ds.RateLimits = d.rateLimits(v, f)
			case "descriptors":
				ds.Descriptors = d.descriptors(v, f)
			case "shadow_mode":
				ds.ShadowMode = d.boolean(v, f)
			case "detailed_metric":
				ds.DetailedMetric = d.boolean(v, f)
			case "value_to_metric":
				ds.ValueToMetric = d.boolean(v, f)
			case "share_threshold":
				ds.ShareThreshold = d.boolean(v, f)
			case "quota_mode":
				ds.QuotaMode = d.boolean(v, f)
			case "metadata":
				ds.Metadata = d.metadata(v, f)
			case "failure_mode":
				ds.FailureMode = d.name(v, f)
			case "over_limit":
				ds.OverLimit = d.name(v, f)
			default:
				return false
			}
			return true
		}) {
			out = append(out, ds)
		}
	}
	return out
}

// rateLimits decodes a non-empty list of rate limits.
func (d *decoder) rateLimits(n *yaml.Node, where string) []RateLimit {
	items := d.list(n, where)
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		d.fail(n, where, "empty list")
	}
	var out []RateLimit
	for i, item := range items {
		if r := d.rateLimit(deref(item), fmt.Sprintf("%s[%d]", where, i)); r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// rateLimit decodes one rate limit, or reports that n is not a mapping and
// returns nil.
func (d *decoder) rateLimit(n *yaml.Node, where string) *RateLimit {
	r := &RateLimit{Pos: Pos{Path: where, Line: n.Line}}
	if !d.fields(n, &r.Pos, func(key string, v *yaml.Node) bool {
		f := r.field(key)
		switch key {
		case "requests_per_unit":
			r.RequestsPerUnit = d.uint32(v, f)
		case "unit":
			r.Unit = d.str(v, f)
		case "unit_multiplier":
			r.UnitMultiplier = d.uint32(v, f)
		case "unlimited":
			r.Unlimited = d.boolean(v, f)
		case "name":
			r.Name = d.str(v, f)
		case "replaces":
			r.Replaces = d.replaces(v, f)
		case "algorithm":
			r.Algorithm = d.name(v, f)
		case "burst":
			r.Burst = d.uint32(v, f)
		default:
			return false
		}
		return true
	}) {
		return nil
	}
	return r
}

// replaces decodes a list of {name: ...}; items that are not mappings are
// reported and left out. Null is an empty list.
func (d *decoder) replaces(n *yaml.Node, where string) []Replace {
	var out []Replace
	for i, item := range d.nullableList(n, where) {
		rp := Replace{Pos: Pos{Path: fmt.Sprintf("%s[%d]", where, i), Line: item.Line}}
		if d.fields(item, &rp.Pos, func(key string, v *yaml.Node) bool {
			if key != "name" {
				return false
			}
			rp.Name = d.str(v, rp.field(key))
			return true
		}) {
			out = append(out, rp)
		}
	}
	return out
}

// fields calls fn for each key of a mapping node, after reporting a node that
// is not a mapping and keys given twice; fn reports whether it knew the key,
// and the line of each known key's value goes to pos.Lines. Unknown keys, and
// known ones whose values (not values within them) had problems, are marked
// in pos for compile.
// fields reports whether n is a mapping.
func (d *decoder) fields(n *yaml.Node, pos *Pos, fn func(key string, v *yaml.Node) bool) bool {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.fail(n, pos.Path, "want a mapping, got %s", kindName(n))
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		key := k.Value
		if seen[key] {
			d.fail(k, pos.field(key), "field given twice")
			continue
		}
		seen[key] = true
		before := len(d.problems)
		if !fn(key, v) {
			d.fail(k, pos.field(key), "unknown field %q", key)
			pos.unknown = true
			continue
		}
		if pos.Lines == nil {
			pos.Lines = make(map[string]int)
		}
		pos.Lines[key] = v.Line
		// A problem of the value itself, not of one within it.
		for _, p := range d.problems[before:] {
			if p.Field == pos.field(key) {
				if pos.failed == nil {
					pos.failed = make(map[string]bool)
				}
				pos.failed[key] = true
			}
		}
	}
	return true
}

func (d *decoder) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.fail(n, field, "want a string, got %s", kindName(n))
		return ""
	}
	return n.Value
}

// name is str for a value that compile looks up by name: a value that is
// not a string is reported here and kept as written, for compile to name
// in its own problem.
func (d *decoder) name(n *yaml.Node, field string) string {
	d.str(n, field)
	return n.Value
}

func (d *decoder) boolean(n *yaml.Node, field string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		d.fail(n, field, "want true or false, got %q", n.Value)
	}
	return b
}

// uint32 decodes a whole number from 0 to math.MaxUint32, or reports it and
// returns nil.
func (d *decoder) uint32(n *yaml.Node, field string) *uint32 {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.fail(n, field, "want a whole number from 0 to %d, got %q", uint64(math.MaxUint32), n.Value)
		return nil
	}
	if v > math.MaxUint32 {
		d.fail(n, field, "%d is more than %d", v, uint64(math.MaxUint32))
		return nil
	}
	x := uint32(v)
	return &x
}

// nullableList is list, where null is an empty list.
func (d *decoder) nullableList(n *yaml.Node, field string) []*yaml.Node {
	if isNull(n) {
		return nil
	}
	return d.list(n, field)
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func (d *decoder) list(n *yaml.Node, field string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "want a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return deref(n.Content[0])
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// yamlErrorLine digs the line out of yaml.v3's "yaml: line N: ..." errors.
func yamlErrorLine(err error) int {
	var line int
	s := err.Error()
	if i := strings.Index(s, "line "); i >= 0 {
		fmt.Sscanf(s[i+5:], "%d", &line)
	}
	return line
}
