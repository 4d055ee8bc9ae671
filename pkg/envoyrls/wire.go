package envoyrls

import (
	"math"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The hot path's own wire code. Every decision decodes one RateLimitRequest
// and encodes one RateLimitResponse; through gRPC's proto codec, with its
// generic tables, the two took about 2.3 µs of the sidecar's CPU per
// decision in scenario (a) (pprof). decodeRequest and appendResponse handle
// the shapes Envoy sends and this server answers, and report false for
// anything else, which Codec then hands to proto as before. The tests hold
// decoding to proto's messages and encoding to proto's bytes
// (wire_test.go); BenchmarkCodec compares the two with proto's.

// The request's field numbers, by message: RateLimitRequest.domain (1),
// descriptors (2) and hits_addend (3); RateLimitDescriptor.entries (1);
// Entry.key (1) and value (2).
const (
	wireRequestDomain      = 1
	wireRequestDescriptors = 2
	wireRequestHits        = 3
	wireDescriptorEntries  = 1
	wireEntryKey           = 1
	wireEntryValue         = 2
)

// wireRole is what decodeRequest (and fixRequest, in codec.go) does with a
// field of the request.
type wireRole uint8

const (
	// wireDecline: a request holding the field is left to proto.
	wireDecline wireRole = iota
	wireDomain
	wireDescriptor
	wireHits
	wireEntry
	wireKey
	wireValue
)

// wireField is one field of a message the request decoder reads, by its
// number and its name in the proto.
type wireField struct {
	num  protowire.Number
	name protoreflect.Name
	role wireRole
}

// wireFields lists every field of one message that the decoder reads.
type wireFields []wireField

// The fields of the messages the request decoder reads: every field of
// each, handled or declined. A field missing from its list is declined too,
// but TestWireFieldsMatchProto fails until it is listed, so that a field a
// go-control-plane upgrade adds is decided on, not dropped unnoticed. A
// declined message field (a descriptor's limit override) is never read,
// so its message needs no list. A descriptor's own hits_addend and
// is_negative_hits are declined as rare: proto decodes them.
var (
	wireRequestFields = wireFields{
		{wireRequestDomain, "domain", wireDomain},
		{wireRequestDescriptors, "descriptors", wireDescriptor},
		{wireRequestHits, "hits_addend", wireHits},
	}
	wireDescriptorFields = wireFields{
		{wireDescriptorEntries, "entries", wireEntry},
		{2, "limit", wireDecline},
		{3, "hits_addend", wireDecline},
		{4, "is_negative_hits", wireDecline},
	}
	wireEntryFields = wireFields{
		{wireEntryKey, "key", wireKey},
		{wireEntryValue, "value", wireValue},
	}
)

// role returns what the decoder does with field num: wireDecline for a
// field not in fs.
func (fs wireFields) role(num protowire.Number) wireRole {
	for _, f := range fs {
		if f.num == num {
			return f.role
		}
	}
	return wireDecline
}

// The most descriptors and entries decodeRequest takes; a larger request is
// for proto. Envoy sends a descriptor per rate limit action list.
const (
	wireMaxDescriptors = 16
	wireMaxEntries     = 32
)

// decodeRequest decodes b into req, which it resets first, as proto.Unmarshal
// would, and reports true, when b holds only a domain, descriptors of
// entries (key and value) and a request hits_addend, each at most once where
// proto3 allows one, every string is valid UTF-8, and there are at most
// wireMaxDescriptors descriptors and wireMaxEntries entries. Otherwise it
// reports false and leaves req untouched: a descriptor's limit override, its
// own hits_addend or any unknown field is for proto to decode.
//
// It reads b once, noting where each string lies, and then makes five
// allocations whatever the request's size: one string holding all of b, of
// which every string field is a part, and one array each for the
// descriptors, the entries and their two pointer slices.
func decodeRequest(b []byte, req *rlsv3.RateLimitRequest) bool {
	var p requestParse
	if !p.request(b) {
		return false
	}
	s := string(b)
	str := func(sp span) string { return s[sp.off : sp.off+sp.n] }
	req.Reset()
	req.Domain, req.HitsAddend = str(p.domain), p.hits
	if p.nd == 0 {
		return true
	}
	descs := make([]rlv3.RateLimitDescriptor, p.nd)
	req.Descriptors = make([]*rlv3.RateLimitDescriptor, p.nd)
	ents := make([]rlv3.RateLimitDescriptor_Entry, p.ne)
	entPtrs := make([]*rlv3.RateLimitDescriptor_Entry, p.ne)
	for i := range ents {
		ents[i].Key, ents[i].Value = str(p.ents[i][0]), str(p.ents[i][1])
		entPtrs[i] = &ents[i]
	}
	first := 0
	for i := range descs {
		if end := p.descEnd[i]; end > first {
			// Each descriptor's entries are a part of one slice; a full
			// slice expression keeps an append to one from writing over
			// the next.
			descs[i].Entries = entPtrs[first:end:end]
			first = end
		}
		req.Descriptors[i] = &descs[i]
	}
	return true
}

// span locates a string in the request: n bytes from off.
type span struct{ off, n int }

// requestParse is where decodeRequest's one reading of a request found its
// parts.
type requestParse struct {
	domain  span
	hits    uint32
	nd, ne  int                     // descriptors and entries
	descEnd [wireMaxDescriptors]int // per descriptor, the end of its entries in ents
	ents    [wireMaxEntries][2]span // per entry, its key and value
}

// field consumes one field's tag and value from b. For a length-delimited
// field v is its bytes, which end the field (so they start at n-len(v));
// for a varint, x is its value. n < 0 on bad input.
func field(b []byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, n int) {
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, n
	}
	var m int
	switch typ {
	case protowire.BytesType:
		v, m = protowire.ConsumeBytes(b[n:])
	case protowire.VarintType:
		x, m = protowire.ConsumeVarint(b[n:])
	default:
		return 0, 0, nil, 0, -1 // no field here has another wire type
	}
	if m < 0 {
		return 0, 0, nil, 0, m
	}
	return num, typ, v, x, n + m
}

// text reports whether v, which ends at end in the request, is a valid
// string, and where it lies.
func text(v []byte, end int) (span, bool) {
	return span{end - len(v), len(v)}, utf8.Valid(v)
}

func (p *requestParse) request(b []byte) bool {
	var domain, hits bool
	for pos := 0; pos < len(b); {
		num, typ, v, x, n := field(b[pos:])
		if n < 0 {
			return false
		}
		pos += n
		switch role := wireRequestFields.role(num); {
		case role == wireDomain && typ == protowire.BytesType && !domain:
			var ok bool
			if p.domain, ok = text(v, pos); !ok {
				return false
			}
			domain = true
		case role == wireDescriptor && typ == protowire.BytesType:
			if !p.descriptor(v, pos-len(v)) {
				return false
			}
		case role == wireHits && typ == protowire.VarintType && !hits && x <= math.MaxUint32:
			p.hits, hits = uint32(x), true
		default:
			return false
		}
	}
	return true
}

// descriptor reads a descriptor's bytes b, which start at base.
func (p *requestParse) descriptor(b []byte, base int) bool {
	if p.nd == wireMaxDescriptors {
		return false
	}
	for pos := 0; pos < len(b); {
		num, typ, v, _, n := field(b[pos:])
		if n < 0 || wireDescriptorFields.role(num) != wireEntry || typ != protowire.BytesType {
			return false
		}
		pos += n
		if !p.entry(v, base+pos-len(v)) {
			return false
		}
	}
	p.descEnd[p.nd] = p.ne
	p.nd++
	return true
}

// entry reads an entry's bytes b, which start at base.
func (p *requestParse) entry(b []byte, base int) bool {
	if p.ne == wireMaxEntries {
		return false
	}
	e := &p.ents[p.ne]
	var key, value bool
	for pos := 0; pos < len(b); {
		num, typ, v, _, n := field(b[pos:])
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		pos += n
		sp, ok := text(v, base+pos)
		switch role := wireEntryFields.role(num); {
		case !ok:
			return false
		case role == wireKey && !key:
			e[0], key = sp, true
		case role == wireValue && !value:
			e[1], value = sp, true
		default:
			return false
		}
	}
	p.ne++
	return true
}

// The response's field numbers, by message.
const (
	wireResponseCode     = 1 // RateLimitResponse.overall_code
	wireResponseStatuses = 2
	wireResponseHeaders  = 3 // response_headers_to_add
	wireResponseBody     = 5 // raw_body

	wireStatusCode      = 1 // DescriptorStatus.code
	wireStatusLimit     = 2 // current_limit
	wireStatusRemaining = 3 // limit_remaining
	wireStatusReset     = 4 // duration_until_reset

	wireLimitPerUnit    = 1 // RateLimit.requests_per_unit
	wireLimitUnit       = 2
	wireLimitName       = 3
	wireLimitMultiplier = 4 // unit_multiplier, a UInt32Value
	wireUInt32Value     = 1 // UInt32Value.value

	wireDurationSeconds = 1
	wireDurationNanos   = 2

	wireHeaderKey   = 1 // HeaderValue.key
	wireHeaderValue = 2
	wireHeaderRaw   = 3 // raw_value
)

// responseSize returns the encoded size of r and whether appendResponse can
// encode it exactly as proto.Marshal would: not if r has a part this server
// never sets (request headers, dynamic metadata, quotas, unknown fields), a
// nil status or header, or a string that is not valid UTF-8, on which
// proto.Marshal fails. The checks are made here once; the size functions
// below, which appendResponse calls again for each embedded message's
// length, only add.
func responseSize(r *rlsv3.RateLimitResponse) (int, bool) {
	if r == nil || !encodable(r) {
		return 0, false
	}
	n := sizeVarintField(wireResponseCode, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		n += sizeMessageField(wireResponseStatuses, statusSize(st))
	}
	for _, h := range r.ResponseHeadersToAdd {
		n += sizeMessageField(wireResponseHeaders, headerSize(h))
	}
	return n + sizeBytesField(wireResponseBody, r.RawBody), true
}

// encodable reports whether r holds only what appendResponse writes; see
// responseSize.
func encodable(r *rlsv3.RateLimitResponse) bool {
	if len(r.RequestHeadersToAdd) > 0 || r.DynamicMetadata != nil || r.Quota != nil || unknown(r) {
		return false
	}
	for _, st := range r.Statuses {
		if st == nil || st.Quota != nil || unknown(st) {
			return false
		}
		if l := st.CurrentLimit; l != nil && (unknown(l) || !utf8.ValidString(l.Name) ||
			l.UnitMultiplier != nil && unknown(l.UnitMultiplier)) {
			return false
		}
		if d := st.DurationUntilReset; d != nil && unknown(d) {
			return false
		}
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h == nil || unknown(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return false
		}
	}
	return true
}

// appendResponse appends r's encoding to b; responseSize must have
// reported r encodable.
func appendResponse(b []byte, r *rlsv3.RateLimitResponse) []byte {
	b = appendVarintField(b, wireResponseCode, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		b = appendMessageHead(b, wireResponseStatuses, statusSize(st))
		b = appendStatus(b, st)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendMessageHead(b, wireResponseHeaders, headerSize(h))
		b = appendBytesField(b, wireHeaderKey, h.Key)
		b = appendBytesField(b, wireHeaderValue, h.Value)
		b = appendBytesField(b, wireHeaderRaw, h.RawValue)
	}
	return appendBytesField(b, wireResponseBody, r.RawBody)
}

func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	n := sizeVarintField(wireStatusCode, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		n += sizeMessageField(wireStatusLimit, limitSize(l))
	}
	n += sizeVarintField(wireStatusRemaining, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		n += sizeMessageField(wireStatusReset, durationSize(d))
	}
	return n
}

func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarintField(b, wireStatusCode, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = appendMessageHead(b, wireStatusLimit, limitSize(l))
		b = appendVarintField(b, wireLimitPerUnit, uint64(l.RequestsPerUnit))
		b = appendVarintField(b, wireLimitUnit, uint64(l.Unit))
		b = appendBytesField(b, wireLimitName, l.Name)
		if mu := l.UnitMultiplier; mu != nil {
			v := uint64(mu.Value)
			b = appendMessageHead(b, wireLimitMultiplier, sizeVarintField(wireUInt32Value, v))
			b = appendVarintField(b, wireUInt32Value, v)
		}
	}
	b = appendVarintField(b, wireStatusRemaining, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = appendMessageHead(b, wireStatusReset, durationSize(d))
		b = appendVarintField(b, wireDurationSeconds, uint64(d.Seconds))
		b = appendVarintField(b, wireDurationNanos, uint64(d.Nanos)) // sign-extended, as proto's int32
	}
	return b
}

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) int {
	n := sizeVarintField(wireLimitPerUnit, uint64(l.RequestsPerUnit)) +
		sizeVarintField(wireLimitUnit, uint64(l.Unit)) +
		sizeBytesField(wireLimitName, l.Name)
	if mu := l.UnitMultiplier; mu != nil {
		n += sizeMessageField(wireLimitMultiplier, sizeVarintField(wireUInt32Value, uint64(mu.Value)))
	}
	return n
}

func durationSize(d *durationpb.Duration) int {
	return sizeVarintField(wireDurationSeconds, uint64(d.Seconds)) + sizeVarintField(wireDurationNanos, uint64(d.Nanos))
}

func headerSize(h *corev3.HeaderValue) int {
	return sizeBytesField(wireHeaderKey, h.Key) + sizeBytesField(wireHeaderValue, h.Value) +
		sizeBytesField(wireHeaderRaw, h.RawValue)
}

// unknown reports whether m carries unknown fields, which proto.Marshal
// would write and appendResponse does not.
func unknown(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }

// The size and append helpers below omit a zero scalar, as proto3 does.

func sizeVarintField(num protowire.Number, x uint64) int {
	if x == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(x)
}

func appendVarintField(b []byte, num protowire.Number, x uint64) []byte {
	if x == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, x)
}

// sizeBytesField and appendBytesField are for a string or bytes field.
func sizeBytesField[T string | []byte](num protowire.Number, v T) int {
	if len(v) == 0 {
		return 0
	}
	return sizeMessageField(num, len(v))
}

func appendBytesField[T string | []byte](b []byte, num protowire.Number, v T) []byte {
	if len(v) == 0 {
		return b
	}
	b = appendMessageHead(b, num, len(v))
	return append(b, v...)
}

// sizeMessageField is the size of an embedded message of n bytes, which is
// written even when empty.
func sizeMessageField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendMessageHead appends the tag and length of an embedded message of n
// bytes, which is to follow.
func appendMessageHead(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}
