package rules

import (
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// node is one descriptor of the compiled rules tree.
type node struct {
	key, value string
	wild       *pattern // the compiled value, when it holds a '*'
	limits     []*Limit
	// Where the descriptor was written, for problems: file, line, and
	// field ("descriptors[0]").
	file, field string
	line        int

	exact     map[entryKey]*node
	wildcards []*node // in the order added (file order); the first match wins
	keyOnly   map[string]*node
}

type entryKey struct{ key, value string }

// add files child under n by its kind: exact value, wildcard, or key only.
// A sibling with the same key and value (for wildcards, the same pattern
// however many stars a run has) is a duplicate, as in envoyproxy/ratelimit:
// add then returns the sibling already there and files nothing.
func (n *node) add(child *node) (dup *node) {
	switch {
	case child.value == "":
		if d := n.keyOnly[child.key]; d != nil {
			return d
		}
		if n.keyOnly == nil {
			n.keyOnly = make(map[string]*node)
		}
		n.keyOnly[child.key] = child
	case child.wild != nil:
		for _, w := range n.wildcards {
			if w.key == child.key && w.wild.canonical() == child.wild.canonical() {
				return w
			}
		}
		n.wildcards = append(n.wildcards, child)
	default:
		k := entryKey{child.key, child.value}
		if d := n.exact[k]; d != nil {
			return d
		}
		if n.exact == nil {
			n.exact = make(map[entryKey]*node)
		}
		n.exact[k] = child
	}
	return nil
}

// duplicate is the problem of a child that add refused because of dup;
// file is the file that child was written in.
func duplicate(child, dup *node, file string) string {
	where := fmt.Sprintf("line %d", dup.line)
	if dup.file != file {
		where = fmt.Sprintf("%s:%d", dup.file, dup.line)
	}
	if child.value == "" {
		return fmt.Sprintf("duplicate descriptor: key %q without value is already defined at this level, at %s", child.key, where)
	}
	return fmt.Sprintf("duplicate descriptor: key %q value %q is already defined at this level, at %s", child.key, dup.value, where)
}

// child picks the child for one entry: an exact key and value beats a
// wildcard, which beats a key-only node; among wildcards of the key, the
// first added that matches wins. It is nil when none fits, as on a leaf,
// whose maps are nil. Whether the child has limits plays no part: an exact
// node without limits (a whitelisted value) still beats the others.
func (n *node) child(e *rlv3.RateLimitDescriptor_Entry) *node {
	if c := n.exact[entryKey{e.Key, e.Value}]; c != nil {
		return c
	}
	for _, w := range n.wildcards {
		if w.key == e.Key && w.wild.match(e.Value) {
			return w
		}
	}
	return n.keyOnly[e.Key]
}

// Match walks a descriptor's entries down the domain's tree as
// envoyproxy/ratelimit does and returns the limits of the node it ends on,
// in file order, or nil. A node applies only if the descriptor's last entry
// lands on it and it has limits: a descriptor longer or shorter than the
// rule that it walks along gets no limit, and a node without limits
// (whitelisted) gets none either. Each returned Limit knows the path of
// nodes that led to it (see Limit.KeyValue and Limit.AppendMetricRule),
// which is the path these entries took. A nil Domain matches nothing.
// Match does not allocate; the returned slice belongs to the Domain and
// must not be modified.
func (d *Domain) Match(entries []*rlv3.RateLimitDescriptor_Entry) []*Limit {
	if d == nil {
		return nil
	}
	level := d.root
	for i, e := range entries {
		next := level.child(e)
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.limits // nil for a node without limits
		}
		level = next // a leaf has no child for the next entry: nil above
	}
	return nil
}
