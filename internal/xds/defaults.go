package xds

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// AnyDomain is the Defaults key whose settings apply to every domain, under
// those of the domain's own key.
const AnyDomain = "*"

// Defaults are the settings of this project that a RateLimitConfig has no
// field for, per domain pushed over xDS, read from a small YAML file:
//
//	domains:
//	  "*":                      # every domain
//	    failure_mode: allow
//	  default/eg/http:          # one domain (Envoy Gateway: the listener)
//	    failure_mode: deny
//	    algorithm: sliding_window
//	    rules:                  # by rule: the limit's name, else its path
//	      route_r.user:
//	        unit_multiplier: 2
//	        algorithm: fixed_window
//	      api_burst:
//	        algorithm: token_bucket
//	        burst: 50
//
// A domain's failure_mode and algorithm are its rules file's top-level
// fields; a rule's unit_multiplier, algorithm and burst are its
// rate_limit's. A
// rule or domain that no push has is ignored, since pushes change.
type Defaults struct {
	Domains map[string]DomainDefaults `yaml:"domains"`
}

// DomainDefaults are one domain's settings; "" leaves a field unset.
type DomainDefaults struct {
	FailureMode string                  `yaml:"failure_mode"`
	Algorithm   string                  `yaml:"algorithm"`
	Rules       map[string]RuleDefaults `yaml:"rules"`
}

// RuleDefaults are one limit's settings; zero leaves a field unset.
type RuleDefaults struct {
	UnitMultiplier uint32 `yaml:"unit_multiplier"`
	Algorithm      string `yaml:"algorithm"`
	// Burst is a token_bucket limit's burst (see rules.RateLimit.Burst).
	Burst uint32 `yaml:"burst"`
}

// LoadDefaults reads and checks a Defaults file: unknown fields and bad
// values (failure modes, algorithms, multipliers) are errors.
func LoadDefaults(path string) (*Defaults, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("xds: domain defaults: %w", err)
	}
	return ParseDefaults(path, data)
}

// ParseDefaults is LoadDefaults of data read from name.
func ParseDefaults(name string, data []byte) (*Defaults, error) {
	d := &Defaults{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(d); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("xds: domain defaults %s: %w", name, err)
	}
	if err := d.check(name); err != nil {
		return nil, err
	}
	return d, nil
}

// check compiles each domain's settings on a domain of one limit per
// rule, so that a value is checked exactly as in a rules file. The rule's
// own rate is unknown until a push, so its limit refills a token per
// microsecond when it has a burst, which any burst then fits; a push that
// cannot hold it is refused when it compiles.
func (d *Defaults) check(name string) error {
	var files []*rules.File
	for _, dom := range sortedKeys(d.Domains) {
		dd := d.Domains[dom]
		where := fmt.Sprintf("domains[%q]", dom)
		alg := dd.Algorithm
		if alg == "" {
			alg = d.Domains[AnyDomain].Algorithm // as Apply falls back
		}
		f := &rules.File{Name: name, Domain: dom, FailureMode: dd.FailureMode, Algorithm: alg, Pos: rules.Pos{Path: where}}
		for _, rule := range sortedKeys(dd.Rules) {
			rd := dd.Rules[rule]
			rate := uint32(1)
			r := &rules.RateLimit{Unit: "second", RequestsPerUnit: &rate, Algorithm: rd.Algorithm,
				Pos: rules.Pos{Path: fmt.Sprintf("%s.rules[%q]", where, rule)}}
			if rd.UnitMultiplier > 0 {
				m := rd.UnitMultiplier
				r.UnitMultiplier = &m
			}
			if rd.Burst > 0 {
				rate = 1_000_000
				b := rd.Burst
				r.Burst = &b
			}
			f.Descriptors = append(f.Descriptors, rules.Descriptor{Key: rule, RateLimit: r})
		}
		files = append(files, f)
	}
	if _, err := (rules.Options{}).Compile(files); err != nil {
		return fmt.Errorf("xds: domain defaults: %w", err)
	}
	return nil
}

// Apply fills in f's unset settings from the defaults of its domain,
// then of AnyDomain. A nil Defaults applies nothing.
func (d *Defaults) Apply(f *rules.File) {
	if d == nil {
		return
	}
	for _, dd := range []DomainDefaults{d.Domains[f.Domain], d.Domains[AnyDomain]} {
		if f.FailureMode == "" {
			f.FailureMode = dd.FailureMode
		}
		if f.Algorithm == "" {
			f.Algorithm = dd.Algorithm
		}
		if len(dd.Rules) > 0 {
			applyRules(f.Descriptors, "", dd.Rules)
		}
	}
}

// applyRules sets the limits of ds named in byRule; parent is the path of
// the descriptors' parent, as package rules names a limit.
func applyRules(ds []rules.Descriptor, parent string, byRule map[string]RuleDefaults) {
	for i := range ds {
		d := &ds[i]
		path := d.Key
		if d.Value != "" {
			path += "_" + d.Value
		}
		if parent != "" {
			path = parent + "." + path
		}
		if r := d.RateLimit; r != nil {
			rule := path
			if r.Name != "" {
				rule = r.Name
			}
			if rd, ok := byRule[rule]; ok {
				if r.UnitMultiplier == nil && rd.UnitMultiplier > 0 {
					m := rd.UnitMultiplier
					r.UnitMultiplier = &m
				}
				if r.Algorithm == "" {
					r.Algorithm = rd.Algorithm
				}
				if r.Burst == nil && rd.Burst > 0 {
					b := rd.Burst
					r.Burst = &b
				}
			}
		}
		applyRules(d.Descriptors, path, byRule)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
