package envoyrls

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata builds a response's dynamic_metadata (Options.DynamicMetadata)
// with envoyproxy/ratelimit's fields:
//
//	domain               the request's domain
//	descriptors          per descriptor, in order: entries ("key=value"
//	                     strings), limit (its override, as text) and
//	                     hitsAddend (its own hits_addend) when it has them
//	hitsAddend           the request's hits_addend, when not 0
//	metadata             the metadata of the rules of the descriptors that
//	                     passed, merged (see mergeMetadata), when any
//
// and two the reference sent until its #1112 (3728d99), kept because
// gateways may read them:
//
//	quotaModeViolations  indexes of the descriptors over a quota-mode
//	                     limit, when there are any
//	quotaModeEnabled     whether a limit that applied is in quota mode
//
// A descriptor passed when its status is not OVER_LIMIT; its rules are
// those whose limits applied to it (not unlimited, not replaced, not
// overridden), as the reference (f2fb157) takes the one limit it matched.
// Envoy puts the struct under the envoy.filters.http.ratelimit namespace.
func (s *Server) dynamicMetadata(req *rlsv3.RateLimitRequest, c *scratch, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	fields := make(map[string]*structpb.Value)
	quotaEnabled := s.quota
	var passed, last *structpb.Struct
	for k, l := range c.limits {
		quotaEnabled = quotaEnabled || l.QuotaMode && !l.Unlimited
		// The limits of one rule share its metadata: merging it again changes nothing.
		if l.Metadata == nil || l.Metadata == last || l.Unlimited || statuses[c.owner[k]].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		last = l.Metadata
		if passed == nil {
			passed = &structpb.Struct{Fields: make(map[string]*structpb.Value, len(l.Metadata.Fields))}
		}
		mergeMetadata(passed, l.Metadata)
	}
	fields["domain"] = structpb.NewStringValue(req.Domain)
	descs := make([]*structpb.Value, len(req.Descriptors))
	for i, d := range req.Descriptors {
		descs[i] = structpb.NewStructValue(descriptorMetadata(d))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if req.HitsAddend != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	if passed != nil {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	if over := slices.Compact(c.quotaOver); len(over) > 0 {
		idx := make([]*structpb.Value, len(over))
		for i, o := range over {
			idx[i] = structpb.NewNumberValue(float64(o))
		}
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: idx})
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(quotaEnabled)
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata merges src into dst as envoyproxy/ratelimit's mergeMetadata
// does: a key dst lacks is added; where both hold a struct, the structs
// are merged the same way; otherwise dst's value stays, so the first
// descriptor to set a key wins. src is a rule's metadata, shared by every
// response: a struct of it that a later merge must change is copied first
// (the reference merges into the rules' own structs).
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v // shared, never modified: copied below before any merge into it
			continue
		}
		hs, vs := have.GetStructValue(), v.GetStructValue()
		if hs == nil || vs == nil {
			continue
		}
		merged := &structpb.Struct{Fields: maps.Clone(hs.Fields)}
		if merged.Fields == nil {
			merged.Fields = make(map[string]*structpb.Value, len(vs.Fields))
		}
		mergeMetadata(merged, vs)
		dst.Fields[k] = structpb.NewStructValue(merged)
	}
}

// descriptorMetadata is one descriptor in dynamic_metadata's descriptors.
func descriptorMetadata(d *rlv3.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, len(d.Entries))
	for i, e := range d.Entries {
		entries[i] = structpb.NewStringValue(e.Key + "=" + e.Value)
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if d.Limit != nil {
		fields["limit"] = structpb.NewStringValue(overrideText(d.Limit))
	}
	if d.HitsAddend != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(d.HitsAddend.Value))
	}
	return &structpb.Struct{Fields: fields}
}

// overrideText writes a limit override as protobuf text, the form
// envoyproxy/ratelimit sends ("requests_per_unit:10 unit:MINUTE"), but
// with single spaces: Go's protobuf varies the spacing of its text from
// build to build on purpose, so the reference's cannot be matched exactly.
func overrideText(o *rlv3.RateLimitDescriptor_RateLimitOverride) string {
	var b strings.Builder
	sep := ""
	if o.RequestsPerUnit != 0 {
		b.WriteString("requests_per_unit:" + strconv.FormatUint(uint64(o.RequestsPerUnit), 10))
		sep = " "
	}
	if o.Unit != 0 {
		b.WriteString(sep + "unit:" + o.Unit.String())
		sep = " "
	}
	if m := o.UnitMultiplier; m != nil {
		b.WriteString(sep + "unit_multiplier:{")
		if m.Value != 0 {
			b.WriteString("value:" + strconv.FormatUint(uint64(m.Value), 10))
		}
		b.WriteString("}")
	}
	return b.String()
}
