package rules

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// FailureMode says what a limit answers when the store fails. The zero
// FailureMode is unset and inherits from the enclosing descriptor or domain;
// a domain that sets none uses FailError.
type FailureMode uint8

const (
	failUnset FailureMode = iota
	// FailError returns gRPC Unavailable, so Envoy's failure_mode_deny
	// decides: by default Envoy lets the request through.
	FailError
	// FailAllow answers OK for the descriptor.
	FailAllow
	// FailDeny answers OVER_LIMIT for the descriptor, with retry-after.
	FailDeny
)

// String returns the mode as written in rules: "error", "allow", "deny".
func (m FailureMode) String() string {
	switch m {
	case FailAllow:
		return "allow"
	case FailDeny:
		return "deny"
	case FailError:
		return "error"
	}
	return ""
}

func parseFailureMode(s string) (FailureMode, bool) {
	switch strings.ToLower(s) {
	case "allow":
		return FailAllow, true
	case "deny":
		return FailDeny, true
	case "error":
		return FailError, true
	}
	return failUnset, false
}

func parseAlgorithm(s string) (window.Algorithm, bool) {
	switch strings.ToLower(s) {
	case "fixed_window":
		return window.FixedWindow, true
	case "sliding_window":
		return window.SlidingWindow, true
	}
	return 0, false
}

// Limit is one compiled rate limit of a descriptor node. Its configuration
// is immutable once loaded, and limits are shared by concurrent requests;
// the one thing that changes is tooMany, a cache swapped atomically. Use it
// by pointer.
type Limit struct {
	Name            string // rate_limit.name; "" when unnamed
	RequestsPerUnit uint32
	Unit            window.Unit
	Multiplier      uint32        // unit_multiplier, >= 1
	Size            time.Duration // Unit x Multiplier
	Unlimited       bool
	Shadow          bool
	Replaces        []string
	Algorithm       window.Algorithm
	FailureMode     FailureMode // resolved: never unset
	DetailedMetric  bool
	// Rule names the limit in metrics and logs: its name, else the path of
	// descriptor keys (and exact values) that leads to it.
	Rule string

	// Override marks Envoy's per-request limit override, which a server
	// builds per request and keys apart from configured limits. Loaded
	// limits never have it.
	Override bool
	// Denial holds the 429 parts a server last built for this limit's
	// denials, for the next denial at the same retry-after to share.
	// Loading leaves it empty; package rules never reads it.
	Denial atomic.Pointer[Denial]

	pb *rlsv3.RateLimitResponse_RateLimit // current_limit, built at load
}

// Denial is the body and headers that Envoy sends with an HTTP 429 for one
// limit's denial with one retry-after. It is shared by every response that
// carries it: nothing may modify it once it is stored in Limit.Denial.
type Denial struct {
	RetryAfter int64 // whole seconds, at least 1
	Body       []byte
	Headers    []*corev3.HeaderValue
}

// envoyUnits maps window units to the response's unit enum. The numbers
// differ: window.Unit has Week (5) between Day and Month, while the response
// enum, which gained WEEK last, has MONTH 5, YEAR 6 and WEEK 7. (Envoy's
// RateLimitUnit, of request overrides, has no WEEK.)
var envoyUnits = map[window.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	window.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	window.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	window.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	window.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	window.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	window.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	window.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// Proto returns the limit as Envoy's current_limit. Loaded limits build it
// once and share it with every response, so callers must not modify it;
// other limits (overrides) get a new one per call.
func (l *Limit) Proto() *rlsv3.RateLimitResponse_RateLimit {
	if l.pb != nil {
		return l.pb
	}
	pb := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            envoyUnits[l.Unit],
	}
	if l.Multiplier > 1 {
		pb.UnitMultiplier = wrapperspb.UInt32(l.Multiplier)
	}
	return pb
}

// Set is a loaded, validated set of domains. It is immutable and safe for
// concurrent use; a reload builds a new one and swaps it in.
type Set struct {
	domains map[string]*Domain
	files   []string
}

// Domain is the compiled rules of one domain, from one file.
type Domain struct {
	Name string
	// FailureMode is the domain's default, for limits that set none and
	// for overrides of descriptors that match no rule; never unset.
	FailureMode FailureMode
	// Algorithm is the domain's default, for the same.
	Algorithm window.Algorithm
	root      *node
	config    domainConfig
}

// Domain returns the named domain or nil.
func (r *Set) Domain(name string) *Domain {
	if r == nil {
		return nil
	}
	return r.domains[name]
}

// Domains returns the domain names, sorted.
func (r *Set) Domains() []string {
	names := make([]string, 0, len(r.domains))
	for n := range r.domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Files returns the files the rules came from.
func (r *Set) Files() []string { return r.files }

// decoder walks one file's YAML nodes, collecting every problem with its
// line instead of stopping at the first.
type decoder struct {
	file       string
	problems   []Problem
	domainLine int
	domainName string
	domainFail FailureMode
	domainAlg  window.Algorithm
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// fields calls fn for each key of a mapping node, after reporting a node that
// is not a mapping and keys given twice. fn reports whether it knew the key.
func (d *decoder) fields(n *yaml.Node, where string, fn func(key string, v *yaml.Node) bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.fail(n, where, "want a mapping, got %s", kindName(n))
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		key := k.Value
		field := join(where, key)
		if seen[key] {
			d.fail(k, field, "field given twice")
			continue
		}
		seen[key] = true
		if !fn(key, v) {
			d.fail(k, field, "unknown field %q", key)
		}
	}
}

func (d *decoder) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.fail(n, field, "want a string, got %s", kindName(n))
		return ""
	}
	return n.Value
}

func (d *decoder) boolean(n *yaml.Node, field string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		d.fail(n, field, "want true or false, got %q", n.Value)
	}
	return b
}

func (d *decoder) uint(n *yaml.Node, field string, max uint64) (uint64, bool) {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.fail(n, field, "want a whole number from 0 to %d, got %q", max, n.Value)
		return 0, false
	}
	if v > max {
		d.fail(n, field, "%d is more than %d", v, max)
		return 0, false
	}
	return v, true
}

func (d *decoder) list(n *yaml.Node, field string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "want a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

// failureMode decodes a failure_mode value; ok is false, and the problem
// reported, for an unknown one.
func (d *decoder) failureMode(n *yaml.Node, field string) (m FailureMode, ok bool) {
	m, ok = parseFailureMode(d.str(n, field))
	if !ok {
		d.fail(n, field, "unknown failure mode %q (want allow, deny or error)", n.Value)
	}
	return m, ok
}

// algorithm decodes an algorithm value, reporting an unknown one.
func (d *decoder) algorithm(n *yaml.Node, field string) window.Algorithm {
	a, ok := parseAlgorithm(d.str(n, field))
	if !ok {
		d.fail(n, field, "unknown algorithm %q (want fixed_window or sliding_window)", n.Value)
	}
	return a
}

// windowProblem is a package window error as a rules problem, without the
// sentinel's "window: bad window: " prefix, which tells someone editing a
// rules file nothing the field name does not.
func windowProblem(err error) string {
	return strings.TrimPrefix(err.Error(), window.ErrBadWindow.Error()+": ")
}

func (d *decoder) file1(data []byte) *Domain {
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
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
	dom := &Domain{root: &node{}}
	var descs *yaml.Node
	var domainNode *yaml.Node
	d.fields(doc.Content[0], "", func(key string, v *yaml.Node) bool {
		switch key {
		case "domain":
			domainNode = v
			d.domainName = d.str(v, "domain")
			d.domainLine = v.Line
		case "descriptors":
			descs = v
		case "failure_mode":
			d.domainFail, _ = d.failureMode(v, key)
		case "algorithm":
			d.domainAlg = d.algorithm(v, key)
		default:
			return false
		}
		return true
	})
	if domainNode == nil {
		d.fail(doc.Content[0], "domain", "missing")
	} else if d.domainName == "" {
		d.fail(domainNode, "domain", "empty")
	}
	dom.Name = d.domainName
	dom.Algorithm = d.domainAlg
	if d.domainFail == failUnset {
		d.domainFail = FailError
	}
	dom.FailureMode = d.domainFail
	dom.config = domainConfig{Domain: dom.Name, File: d.file, FailureMode: d.domainFail.String(), Algorithm: d.domainAlg.String()}
	if descs != nil {
		dom.config.Descriptors = d.descriptors(descs, "descriptors", dom.root, "", d.domainFail)
	}
	return dom
}

// descriptors decodes a list of descriptor nodes into parent's children.
func (d *decoder) descriptors(n *yaml.Node, where string, parent *node, path string, inherited FailureMode) []descriptorConfig {
	var out []descriptorConfig
	for i, item := range d.list(n, where) {
		field := fmt.Sprintf("%s[%d]", where, i)
		if cfg, ok := d.descriptor(deref(item), field, parent, path, inherited); ok {
			out = append(out, cfg)
		}
	}
	return out
}

func (d *decoder) descriptor(n *yaml.Node, where string, parent *node, path string, inherited FailureMode) (descriptorConfig, bool) {
	var cfg descriptorConfig
	var keyNode, valueNode, limitNode, limitsNode, childrenNode *yaml.Node
	var shadow bool
	mode := inherited
	d.fields(n, where, func(key string, v *yaml.Node) bool {
		f := join(where, key)
		switch key {
		case "key":
			keyNode = v
			cfg.Key = d.str(v, f)
		case "value":
			valueNode = v
			cfg.Value = d.str(v, f)
		case "rate_limit":
			limitNode = v
		case "rate_limits":
			limitsNode = v
		case "descriptors":
			childrenNode = v
		case "shadow_mode":
			shadow = d.boolean(v, f)
			cfg.ShadowMode = shadow
		case "detailed_metric":
			cfg.DetailedMetric = d.boolean(v, f)
		case "value_to_metric":
			cfg.ValueToMetric = d.boolean(v, f)
		case "failure_mode":
			if m, ok := d.failureMode(v, f); ok {
				mode = m
				cfg.FailureMode = m.String()
			}
		default:
			return false
		}
		return true
	})
	if n.Kind != yaml.MappingNode {
		return cfg, false
	}
	if keyNode == nil {
		d.fail(n, join(where, "key"), "missing")
	} else if cfg.Key == "" {
		d.fail(keyNode, join(where, "key"), "empty")
	}
	if limitNode == nil && limitsNode == nil && childrenNode == nil {
		d.fail(n, where, "descriptor %q has neither rate_limit nor descriptors", cfg.Key)
	}
	if limitNode != nil && limitsNode != nil {
		d.fail(limitsNode, join(where, "rate_limits"), "give rate_limit or rate_limits, not both")
	}
	nd := &node{}
	nd.key, nd.value = cfg.Key, cfg.Value
	step := cfg.Key
	if cfg.Value != "" {
		step += "_" + cfg.Value
	}
	nd.path = step
	if path != "" {
		nd.path = path + "." + step
	}
	if limitNode != nil {
		if l, lc, ok := d.limit(limitNode, join(where, "rate_limit"), nd.path, shadow, mode, cfg.DetailedMetric, 0); ok {
			nd.limits = append(nd.limits, l)
			cfg.RateLimit = &lc
		}
	}
	if limitsNode != nil {
		items := d.list(limitsNode, join(where, "rate_limits"))
		if limitsNode.Kind == yaml.SequenceNode && len(items) == 0 {
			d.fail(limitsNode, join(where, "rate_limits"), "empty list")
		}
		for i, item := range items {
			if l, lc, ok := d.limit(deref(item), fmt.Sprintf("%s.rate_limits[%d]", where, i), nd.path, shadow, mode, cfg.DetailedMetric, i); ok {
				nd.limits = append(nd.limits, l)
				cfg.RateLimits = append(cfg.RateLimits, lc)
			}
		}
	}
	if childrenNode != nil {
		cfg.Descriptors = d.descriptors(childrenNode, join(where, "descriptors"), nd, nd.path, mode)
	}
	if keyNode == nil || cfg.Key == "" {
		return cfg, false
	}
	if err := parent.add(nd); err != nil {
		line := n.Line
		if valueNode != nil {
			line = valueNode.Line
		}
		d.problems = append(d.problems, Problem{File: d.file, Line: line, Field: where, Msg: err.Error()})
		return cfg, false
	}
	return cfg, true
}

func (d *decoder) limit(n *yaml.Node, where, path string, shadow bool, mode FailureMode, detailed bool, index int) (*Limit, limitConfig, bool) {
	before := len(d.problems)
	l := &Limit{Shadow: shadow, FailureMode: mode, Algorithm: d.domainAlg, DetailedMetric: detailed, Multiplier: 1}
	var lc limitConfig
	var rpuNode, unitNode, multNode *yaml.Node
	d.fields(n, where, func(key string, v *yaml.Node) bool {
		f := join(where, key)
		switch key {
		case "requests_per_unit":
			rpuNode = v
			if x, ok := d.uint(v, f, math.MaxUint32); ok {
				l.RequestsPerUnit = uint32(x)
				v := uint32(x)
				lc.RequestsPerUnit = &v
			}
		case "unit":
			unitNode = v
			u, err := window.ParseUnit(d.str(v, f))
			if err != nil {
				d.fail(v, f, "%s", windowProblem(err))
			}
			l.Unit = u
			lc.Unit = u.String()
		case "unit_multiplier":
			multNode = v
			if x, ok := d.uint(v, f, math.MaxUint32); ok {
				if x == 0 {
					d.fail(v, f, "must be a positive whole number, got 0")
				}
				l.Multiplier = uint32(x)
				lc.UnitMultiplier = l.Multiplier
			}
		case "unlimited":
			l.Unlimited = d.boolean(v, f)
			lc.Unlimited = l.Unlimited
		case "name":
			l.Name = d.str(v, f)
			lc.Name = l.Name
		case "replaces":
			for i, item := range d.list(v, f) {
				rf := fmt.Sprintf("%s[%d]", f, i)
				var name string
				d.fields(item, rf, func(k string, v *yaml.Node) bool {
					if k != "name" {
						return false
					}
					name = d.str(v, join(rf, k))
					return true
				})
				if name == "" {
					d.fail(item, join(rf, "name"), "missing or empty")
					continue
				}
				l.Replaces = append(l.Replaces, name)
				lc.Replaces = append(lc.Replaces, replaceConfig{Name: name})
			}
		case "algorithm":
			l.Algorithm = d.algorithm(v, f) // lc.Algorithm is set below, inherited or not
		default:
			return false
		}
		return true
	})
	if n.Kind != yaml.MappingNode {
		return nil, lc, false
	}
	if l.Unlimited {
		if unitNode != nil {
			d.fail(unitNode, join(where, "unit"), "an unlimited limit takes no unit")
		}
		if rpuNode != nil {
			d.fail(rpuNode, join(where, "requests_per_unit"), "an unlimited limit takes no requests_per_unit")
		}
	} else {
		if unitNode == nil {
			d.fail(n, join(where, "unit"), "missing")
		}
		if rpuNode == nil {
			d.fail(n, join(where, "requests_per_unit"), "missing")
		}
		if l.Unit != 0 {
			size, err := window.Size(l.Unit, uint64(l.Multiplier))
			if err != nil {
				d.fail(multNode, join(where, "unit_multiplier"), "window too long: %d %ss is more than %v", l.Multiplier, l.Unit, window.MaxSize)
			}
			l.Size = size
		}
	}
	lc.Algorithm = l.Algorithm.String()
	l.Rule = path
	if l.Name != "" {
		l.Rule = l.Name
	} else if index > 0 {
		l.Rule = fmt.Sprintf("%s[%d]", path, index)
	}
	l.pb = l.Proto()
	return l, lc, len(d.problems) == before
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
