package rules

import (
	"maps"
	"slices"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// MatchBucket matches an RLQS bucket_id (Envoy's rate_limit_quota filter
// sends a map of key to value, without order) against the domain's tree: at
// each level it takes the bucket entry whose key is a child's key, choosing
// the child as Match does (exact value, then wildcards in file order, then
// key only), and the bucket matches the node where every one of its keys
// has been used, once each. It returns that node's limits, as Match would
// for the same entries, and the entries in the order of the path, which is
// the descriptor ShouldRateLimit would get for the same rule: its counter
// keys are the same.
//
// When the keys could be taken in more than one order (rules with
// a→b and b→a), the bucket's keys are tried in increasing order at each
// level and the first complete path decides, whether its node has limits
// or not (a node without limits is a whitelist, as in Match), so the
// answer is deterministic. limits is nil when no path uses every key, or
// when the node it ends on has none; entries is nil when no path does. A
// nil Domain or an empty bucket matches nothing.
//
// The walk visits each node of the tree at most once, and looks up at
// most len(bucket) children per node.
func (d *Domain) MatchBucket(bucket map[string]string) (limits []*Limit, entries []*rlv3.RateLimitDescriptor_Entry) {
	if d == nil || len(bucket) == 0 {
		return nil, nil
	}
	w := bucketWalk{keys: slices.Sorted(maps.Keys(bucket)), bucket: bucket}
	w.used = make([]bool, len(w.keys))
	w.path = make([]*rlv3.RateLimitDescriptor_Entry, 0, len(w.keys))
	n := w.walk(d.root)
	if n == nil {
		return nil, nil
	}
	return n.limits, w.path
}

// bucketWalk is the state of one MatchBucket: the bucket's keys, sorted,
// which of them the path so far used, and the path's entries.
type bucketWalk struct {
	keys   []string
	bucket map[string]string
	used   []bool
	path   []*rlv3.RateLimitDescriptor_Entry
}

// walk returns the node, at or below level, where the path first uses
// every key of the bucket, or nil; w.path then holds its entries.
func (w *bucketWalk) walk(level *node) *node {
	if len(w.path) == len(w.keys) {
		return level
	}
	for i, k := range w.keys {
		if w.used[i] {
			continue
		}
		e := &rlv3.RateLimitDescriptor_Entry{Key: k, Value: w.bucket[k]}
		next := level.child(e)
		if next == nil {
			continue
		}
		w.used[i] = true
		w.path = append(w.path, e)
		if n := w.walk(next); n != nil {
			return n
		}
		w.used[i] = false
		w.path = w.path[:len(w.path)-1]
	}
	return nil
}
