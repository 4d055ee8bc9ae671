package rules

import (
	"encoding/json"
	"sort"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// Set is a compiled, valid set of domains. It is immutable and safe for
// concurrent use; a reload builds a new one and swaps it in.
type Set struct {
	domains map[string]*Domain
	files   []string
	limits  []*Limit // every limit of every domain, by Limit.ID
}

// Domain is the compiled rules of one domain, from one file or, with
// Options.MergeDomains, several.
type Domain struct {
	Name string
	// FailureMode is the domain's default, for limits that set none and
	// for overrides of descriptors that match no rule; never unset.
	FailureMode FailureMode
	// Algorithm is the domain's default, for the same.
	Algorithm window.Algorithm
	// OverLimit is the domain's default, for the same; never unset.
	OverLimit OverLimit

	root  *node
	top   []*node // root's children in file order, for merging
	files []*File // as decoded, for MarshalJSON
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

// Limits returns every limit of the Set, each at its Limit.ID, in the
// order of the files and of their descriptors. The slice is shared: callers
// must not modify it.
func (r *Set) Limits() []*Limit {
	if r == nil {
		return nil
	}
	return r.limits
}

// Files returns the files the rules came from.
func (r *Set) Files() []string { return r.files }

// MarshalJSON renders the rules as decoded, for people (GET /rules): the
// files, and each domain's Files, sorted by domain (a merged domain's in
// the order they merged). Values are as written;
// what a field does not set (a default, or what a descriptor inherits) is
// left out.
func (r *Set) MarshalJSON() ([]byte, error) {
	out := struct {
		Files   []string `json:"files"`
		Domains []*File  `json:"domains"`
	}{Files: r.files, Domains: []*File{}}
	for _, name := range r.Domains() {
		out.Domains = append(out.Domains, r.domains[name].files...)
	}
	return json.Marshal(out)
}
