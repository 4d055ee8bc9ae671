package envoyrls

import (
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// appendKey builds the key of l's counter (see window.AppendKeyHead)
// straight from Envoy's entries, so no copy is made per request; l is a
// limit the entries matched. An entry that matched a share_threshold
// wildcard is keyed by its pattern (Limit.KeyValue), so all the values it
// matches share the counter. Each limit of a descriptor has its own counter
// (window.AppendKeyCounter), so a descriptor's limits of one length never
// count a request twice in one counter.
func (s *Server) appendKey(dst []byte, domain string, entries []*rlv3.RateLimitDescriptor_Entry, l *rules.Limit) []byte {
	dst = window.AppendKeyHead(dst, s.prefix, domain)
	for i, e := range entries {
		dst = window.AppendKeyEntry(dst, e.Key, l.KeyValue(i, e.Value))
	}
	if l.Override {
		dst = window.AppendKeyQualifier(dst, "override")
	}
	return window.AppendKeyCounter(window.AppendKeyEnd(dst), l.Index(), l.Algorithm)
}
