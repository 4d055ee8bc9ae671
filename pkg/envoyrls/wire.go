package envoyrls

import (
	"math"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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

// The rest of the request's field numbers (see codec.go for its strings):
// RateLimitRequest.hits_addend.
const wireRequestHits = 3

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
		switch {
		case num == wireRequestDomain && typ == protowire.BytesType && !domain:
			var ok bool
			if p.domain, ok = text(v, pos); !ok {
				return false
			}
			domain = true
		case num == wireRequestDescriptors && typ == protowire.BytesType:
			if !p.descriptor(v, pos-len(v)) {
				return false
			}
		case num == wireRequestHits && typ == protowire.VarintType && !hits && x <= math.MaxUint32:
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
		if n < 0 || num != wireDescriptorEntries || typ != protowire.BytesType {
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
		switch {
		case !ok:
			return false
		case num == wireEntryKey && !key:
			e[0], key = sp, true
		case num == wireEntryValue && !value:
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
	wireLimitMultiplier = 4 // unit_multiplier (UInt32Value, its value 1)

	wireDurationSeconds = 1
	wireDurationNanos   = 2

	wireHeaderKey   = 1 // HeaderValue.key
	wireHeaderValue = 2
	wireHeaderRaw   = 3 // raw_value
)

// responseSize returns the encoded size of r, which appendResponse can
// encode exactly as proto.Marshal would, or false if r has a part this
// server never sets (request headers, dynamic metadata, quotas, unknown
// fields), a nil status or header, or a string that is not valid UTF-8, on
// which proto.Marshal fails.
func responseSize(r *rlsv3.RateLimitResponse) (int, bool) {
	if len(r.RequestHeadersToAdd) > 0 || r.DynamicMetadata != nil || r.Quota != nil || unknown(r) {
		return 0, false
	}
	n := sizeVarintField(wireResponseCode, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		m, ok := statusSize(st)
		if !ok {
			return 0, false
		}
		n += sizeMessageField(wireResponseStatuses, m)
	}
	for _, h := range r.ResponseHeadersToAdd {
		m, ok := headerSize(h)
		if !ok {
			return 0, false
		}
		n += sizeMessageField(wireResponseHeaders, m)
	}
	return n + sizeBytesField(wireResponseBody, r.RawBody), true
}

// appendResponse appends r's encoding to b; responseSize must have
// reported r encodable.
func appendResponse(b []byte, r *rlsv3.RateLimitResponse) []byte {
	b = appendVarintField(b, wireResponseCode, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		m, _ := statusSize(st)
		b = appendMessageHead(b, wireResponseStatuses, m)
		b = appendStatus(b, st)
	}
	for _, h := range r.ResponseHeadersToAdd {
		m, _ := headerSize(h)
		b = appendMessageHead(b, wireResponseHeaders, m)
		b = appendBytesField(b, wireHeaderKey, h.Key)
		b = appendBytesField(b, wireHeaderValue, h.Value)
		b = appendBytesField(b, wireHeaderRaw, h.RawValue)
	}
	return appendBytesField(b, wireResponseBody, r.RawBody)
}

func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus) (int, bool) {
	if st == nil || st.Quota != nil || unknown(st) {
		return 0, false
	}
	n := sizeVarintField(wireStatusCode, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		m, ok := limitSize(l)
		if !ok {
			return 0, false
		}
		n += sizeMessageField(wireStatusLimit, m)
	}
	n += sizeVarintField(wireStatusRemaining, uint64(st.LimitRemaining))
	if dur := st.DurationUntilReset; dur != nil {
		if unknown(dur) {
			return 0, false
		}
		n += sizeMessageField(wireStatusReset, durationSize(dur))
	}
	return n, true
}

func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarintField(b, wireStatusCode, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		m, _ := limitSize(l)
		b = appendMessageHead(b, wireStatusLimit, m)
		b = appendVarintField(b, wireLimitPerUnit, uint64(l.RequestsPerUnit))
		b = appendVarintField(b, wireLimitUnit, uint64(l.Unit))
		b = appendBytesField(b, wireLimitName, l.Name)
		if mu := l.UnitMultiplier; mu != nil {
			b = appendMessageHead(b, wireLimitMultiplier, sizeVarintField(1, uint64(mu.Value)))
			b = appendVarintField(b, 1, uint64(mu.Value))
		}
	}
	b = appendVarintField(b, wireStatusRemaining, uint64(st.LimitRemaining))
	if dur := st.DurationUntilReset; dur != nil {
		b = appendMessageHead(b, wireStatusReset, durationSize(dur))
		b = appendVarintField(b, wireDurationSeconds, uint64(dur.Seconds))
		b = appendVarintField(b, wireDurationNanos, uint64(dur.Nanos)) // sign-extended, as proto's int32
	}
	return b
}

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) (int, bool) {
	if unknown(l) || !utf8.ValidString(l.Name) {
		return 0, false
	}
	n := sizeVarintField(wireLimitPerUnit, uint64(l.RequestsPerUnit)) +
		sizeVarintField(wireLimitUnit, uint64(l.Unit)) +
		sizeBytesField(wireLimitName, l.Name)
	if mu := l.UnitMultiplier; mu != nil {
		if unknown(mu) {
			return 0, false
		}
		n += sizeMessageField(wireLimitMultiplier, sizeVarintField(1, uint64(mu.Value)))
	}
	return n, true
}

func durationSize(d *durationpb.Duration) int {
	return sizeVarintField(wireDurationSeconds, uint64(d.Seconds)) + sizeVarintField(wireDurationNanos, uint64(d.Nanos))
}

func headerSize(h *corev3.HeaderValue) (int, bool) {
	if h == nil || unknown(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
		return 0, false
	}
	return sizeBytesField(wireHeaderKey, h.Key) + sizeBytesField(wireHeaderValue, h.Value) +
		sizeBytesField(wireHeaderRaw, h.RawValue), true
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
