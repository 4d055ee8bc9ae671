package envoyrls

import (
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// setKeys sets the Key of each of c's counters. Each limit of a descriptor
// has its own counter (window.AppendKeyCounter), so a descriptor's limits
// of one length never count a request twice in one counter; their keys
// differ only there, since they are the limits of one rules node (or an
// override, alone). So the head is built once per descriptor, and the
// descriptor's keys are slices of one string: one allocation per
// descriptor, whatever its number of limits.
func (s *Server) setKeys(req *rlsv3.RateLimitRequest, c *call) {
	owner, first, head := -1, 0, 0
	for k, l := range c.limits {
		slot := c.slot[k]
		if slot < 0 {
			continue
		}
		if c.owner[k] != owner {
			c.keysFrom(first)
			owner, first = c.owner[k], slot
			c.key = s.appendKeyHead(c.key[:0], req.Domain, req.Descriptors[owner].Entries, l)
			head = len(c.key)
		} else {
			c.key = append(c.key, c.key[:head]...)
		}
		c.key = window.AppendKeyCounter(c.key, l.Index(), l.Algorithm)
		c.keyEnds = append(c.keyEnds, len(c.key))
	}
	c.keysFrom(first)
}

// keysFrom sets the keys of the counters from c.reqs[first] on: the keys
// that c.key holds end to end, ending at c.keyEnds.
func (c *call) keysFrom(first int) {
	if len(c.keyEnds) == 0 {
		return
	}
	keys, start := string(c.key), 0
	for i, end := range c.keyEnds {
		c.reqs[first+i].Key = keys[start:end]
		start = end
	}
	c.keyEnds = c.keyEnds[:0]
}

// appendKeyHead builds the key of l's descriptor, up to its counter (see
// window.AppendKeyHead), straight from Envoy's entries, so no copy is made
// per request; l is a limit the entries matched. An entry that matched a
// share_threshold wildcard is keyed by its pattern (Limit.KeyValue), so
// all the values it matches share the counter.
func (s *Server) appendKeyHead(dst []byte, domain string, entries []*rlv3.RateLimitDescriptor_Entry, l *rules.Limit) []byte {
	dst = window.AppendKeyHead(dst, s.prefix, domain)
	for i, e := range entries {
		dst = window.AppendKeyEntry(dst, e.Key, l.KeyValue(i, e.Value))
	}
	if l.Override {
		dst = window.AppendKeyQualifier(dst, "override")
	}
	return window.AppendKeyEnd(dst)
}
