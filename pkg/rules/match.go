package rules

import (
	"fmt"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// node is one descriptor of the compiled rules tree.
type node struct {
	key, value string
	limits     []*Limit

	exact     map[entryKey]*node
	wildcards []*node // value ends in '*'; in file order, first match wins
	keyOnly   map[string]*node
}

type entryKey struct{ key, value string }

// add files child under n by its kind: exact value, trailing-'*' wildcard, or
// key only. A sibling with the same key and value is an error, as in
// envoyproxy/ratelimit.
func (n *node) add(child *node) error {
	switch {
	case child.value == "":
		if n.keyOnly == nil {
			n.keyOnly = make(map[string]*node)
		}
		if _, dup := n.keyOnly[child.key]; dup {
			return fmt.Errorf("duplicate descriptor: key %q without value is already defined at this level", child.key)
		}
		n.keyOnly[child.key] = child
	case strings.HasSuffix(child.value, "*"):
		for _, w := range n.wildcards {
			if w.key == child.key && w.value == child.value {
				return fmt.Errorf("duplicate descriptor: key %q value %q is already defined at this level", child.key, child.value)
			}
		}
		n.wildcards = append(n.wildcards, child)
	default:
		if n.exact == nil {
			n.exact = make(map[entryKey]*node)
		}
		k := entryKey{child.key, child.value}
		if _, dup := n.exact[k]; dup {
			return fmt.Errorf("duplicate descriptor: key %q value %q is already defined at this level", child.key, child.value)
		}
		n.exact[k] = child
	}
	return nil
}

// child picks the child for one entry: an exact key and value beats a
// wildcard, which beats a key-only node. It is nil when none fits, as on a
// leaf, whose maps are nil.
func (n *node) child(e *rlv3.RateLimitDescriptor_Entry) *node {
	if c := n.exact[entryKey{e.Key, e.Value}]; c != nil {
		return c
	}
	for _, w := range n.wildcards {
		if w.key == e.Key && strings.HasPrefix(e.Value, w.value[:len(w.value)-1]) {
			return w
		}
	}
	return n.keyOnly[e.Key]
}

// Match walks a descriptor's entries down the domain's tree as
// envoyproxy/ratelimit does and returns the limits of the node it ends on,
// in file order, or nil. A node applies only if the descriptor's last entry
// lands on it and it has limits: a descriptor longer or shorter than the
// rule that it walks along gets no limit. A nil Domain matches nothing.
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
