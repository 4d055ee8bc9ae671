package rules

import (
	"strconv"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// step is what one node on a limit's path says about the request entry that
// lands on it, for counter keys and metric labels. Entry i of a descriptor
// that matches a limit landed on the limit's path[i].
type step struct {
	key, value string // as written: value "" for a key-only node, the pattern for a wildcard
	wildcard   bool
	share      bool // share_threshold: the pattern stands for the value in counter keys
	toMetric   bool // value_to_metric
}

// labelValue is what entry value v, landing on s, shows in a metric label
// built as envoyproxy/ratelimit builds its stats keys: the value written
// for an exact node; for a wildcard, its pattern, unless value_to_metric
// asks for v (share_threshold keeps the pattern, since the values share one
// counter); for a key-only node nothing, unless value_to_metric asks for v.
func (s *step) labelValue(v string) string {
	switch {
	case s.wildcard && s.toMetric && !s.share:
		return v
	case s.wildcard:
		return s.value
	case s.value == "" && s.toMetric:
		return v
	}
	return s.value
}

// dynamic reports whether labelValue shows request values.
func (s *step) dynamic() bool {
	return s.toMetric && (s.value == "" || s.wildcard && !s.share)
}

// KeyValue returns what stands for value, the value of the i-th entry of a
// descriptor that matched l, in l's counter key: the wildcard's pattern
// when that entry landed on a wildcard with share_threshold, so that every
// value the wildcard matches counts on one counter, else value itself.
//
// Keys stay distinct: a request value equal to a pattern lands on that
// same wildcard (a pattern matches itself), or on an earlier wildcard that
// then also matches every value the pattern matches, so that the pattern's
// own node is never reached. Either way no two nodes share a key.
func (l *Limit) KeyValue(i int, value string) string {
	if i < len(l.path) && l.path[i].share {
		return l.path[i].value
	}
	return value
}

// AppendMetricRule appends the limit's metric label for a descriptor that
// matched it, as envoyproxy/ratelimit builds its stats key with
// value_to_metric, less the domain: per entry its key, then "_" and the
// value where one shows ("route_api.http_method_GET.subject_id"). For the
// i-th (i > 0) of a descriptor's rate_limits, "[i]" follows. For a limit
// without a name and without value_to_metric on its path, it is l.Rule.
func (l *Limit) AppendMetricRule(dst []byte, entries []*rlv3.RateLimitDescriptor_Entry) []byte {
	for i := range min(len(entries), len(l.path)) {
		if i > 0 {
			dst = append(dst, '.')
		}
		s := &l.path[i]
		dst = append(dst, s.key...)
		if v := s.labelValue(entries[i].Value); v != "" {
			dst = append(dst, '_')
			dst = append(dst, v...)
		}
	}
	if l.index > 0 {
		dst = append(dst, '[')
		dst = strconv.AppendInt(dst, int64(l.index), 10)
		dst = append(dst, ']')
	}
	return dst
}
