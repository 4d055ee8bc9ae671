package envoyrls

import (
	"math/rand/v2"
	"time"

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
// descriptor, whatever its number of limits. A counter in
// envoyproxy/ratelimit's layout (see referenceLayout) has a key of its own
// in that string.
func (s *Server) setKeys(req *rlsv3.RateLimitRequest, c *scratch) {
	owner, first, headFrom, headTo := -1, 0, 0, 0
	for k, l := range c.limits {
		slot := c.slot[k]
		if slot < 0 {
			continue
		}
		if c.owner[k] != owner {
			c.keysFrom(first)
			owner, first, headFrom, headTo = c.owner[k], slot, 0, 0
			c.key = c.key[:0]
		}
		entries := req.Descriptors[owner].Entries
		switch {
		case c.reqs[slot].Reference:
			c.key = s.appendReferenceKey(c.key, req.Domain, entries, l)
		case headTo > headFrom:
			c.key = append(c.key, c.key[headFrom:headTo]...)
			c.key = window.AppendKeyCounter(c.key, l.Index(), l.Algorithm)
		default:
			headFrom = len(c.key)
			c.key = s.appendKeyHead(c.key, req.Domain, entries, l)
			headTo = len(c.key)
			c.key = window.AppendKeyCounter(c.key, l.Index(), l.Algorithm)
		}
		c.keyEnds = append(c.keyEnds, len(c.key))
	}
	c.keysFrom(first)
}

// counterOf returns l's counter as every decision on it asks the store:
// its window, algorithm and burst, and envoyproxy/ratelimit's layout where
// referenceLayout says so; without a key or hits, which belong to the
// request.
func (s *Server) counterOf(l *rules.Limit) window.Counter {
	r := window.Counter{Limit: uint64(l.RequestsPerUnit), Size: l.Size, Algorithm: l.Algorithm, Burst: uint64(l.Burst)}
	if s.referenceLayout(l) {
		r.Reference, r.Jitter = true, s.referenceJitter()
	}
	return r
}

// Counter returns the counter that ShouldRateLimit keeps for limit l of a
// descriptor with entries in domain (l is a limit that Match gave for
// them): its key, window, algorithm and burst, without hits. Another
// protocol that charges the same rules (RLQS) takes its counters from here,
// so both count in one counter. l must not be an override.
func (s *Server) Counter(domain string, entries []*rlv3.RateLimitDescriptor_Entry, l *rules.Limit) window.Counter {
	r := s.counterOf(l)
	if r.Reference {
		r.Key = string(s.appendReferenceKey(nil, domain, entries, l))
		return r
	}
	r.Key = string(window.AppendKeyCounter(s.appendKeyHead(nil, domain, entries, l), l.Index(), l.Algorithm))
	return r
}

// keysFrom sets the keys of the counters from c.reqs[first] on: the keys
// that c.key holds end to end, ending at c.keyEnds.
func (c *scratch) keysFrom(first int) {
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

// ReferenceKeys gives the limits that envoyproxy/ratelimit can express its
// Redis keys and way of counting, so that during a rolling update from it
// (or back) both servers count in the same counters; see
// Options.ReferenceKeys and window.Counter.Reference.
type ReferenceKeys struct {
	// Prefix starts every such key verbatim: envoyproxy/ratelimit's
	// CACHE_KEY_PREFIX, empty there by default.
	Prefix string
	// JitterMax bounds the random part, in whole seconds, added to such a
	// counter's TTL at each decision, as envoyproxy/ratelimit's
	// EXPIRATION_JITTER_MAX_SECONDS (300 s by default there) does; 0 adds
	// none.
	JitterMax time.Duration
}

// referenceLayout reports whether l's counter is kept in
// envoyproxy/ratelimit's layout: ReferenceKeys is on and l is a limit that
// server could hold, a fixed window of one unit and the first (there, the
// only) limit of its descriptor. Envoy's limit overrides qualify too: the
// reference keys them as the configured limit.
func (s *Server) referenceLayout(l *rules.Limit) bool {
	return s.ref != nil && l.Algorithm.ReferenceLayout() && l.Multiplier == 1 && l.Index() == 0
}

// referenceJitter draws the random part of a reference-layout counter's
// TTL: whole seconds in [0, JitterMax), as envoyproxy/ratelimit draws it at
// each decision.
func (s *Server) referenceJitter() time.Duration {
	n := int64(s.ref.JitterMax / time.Second)
	if n <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(n)) * time.Second
}

// appendReferenceKey builds the key of l's counter for descriptor entries
// in envoyproxy/ratelimit's layout (window.AppendReferenceKey), less the
// window that the store appends. A share_threshold wildcard is keyed by its
// pattern, as there.
func (s *Server) appendReferenceKey(dst []byte, domain string, entries []*rlv3.RateLimitDescriptor_Entry, l *rules.Limit) []byte {
	dst = window.AppendReferenceKey(dst, s.ref.Prefix, domain)
	for i, e := range entries {
		dst = window.AppendReferenceEntry(dst, e.Key, l.KeyValue(i, e.Value))
	}
	return dst
}
