package envoyrls

import (
	"math"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The hot path's own request decoder. Every decision decodes one
// RateLimitRequest, which gRPC's proto codec does through generic tables,
// with more CPU and allocations. go-control-plane generates encoders
// (Codec.Marshal uses them) but no decoders, so decodeRequest is written by
// hand: it handles the shape Envoy sends and reports false for anything
// else, which Codec then hands to proto. The tests hold it to proto's
// messages (wire_test.go); BenchmarkCodec compares it with proto's.

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
	// Most fields of Envoy's messages have a one-byte tag (field 1 to 15)
	// and a one-byte length or varint: read those without the general
	// decoding, which costs more than the field itself.
	if len(b) >= 2 && b[0] >= 1<<3 && b[0] < 0x80 && b[1] < 0x80 {
		num, typ = protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch {
		case typ == protowire.VarintType:
			return num, typ, nil, uint64(b[1]), 2
		case typ == protowire.BytesType && 2+int(b[1]) <= len(b):
			return num, typ, b[2 : 2+int(b[1])], 0, 2 + int(b[1])
		}
	}
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
	key, value, ok := readEntry(b, base, true)
	if !ok {
		return false
	}
	p.ents[p.ne] = [2]span{key, value}
	p.ne++
	return true
}

// readEntry reads the bytes b, which start at base, of a descriptor's entry
// or a bucket_id's map entry: its key and value, each "" when absent, as
// for proto. With check, it declines what the decoders leave to proto (a
// field twice, another field, invalid UTF-8); without, b was checked before.
func readEntry(b []byte, base int, check bool) (key, value span, ok bool) {
	var hasKey, hasValue bool
	for pos := 0; pos < len(b); {
		num, typ, v, _, n := field(b[pos:])
		if n < 0 || typ != protowire.BytesType {
			return span{}, span{}, false
		}
		pos += n
		sp := span{base + pos - len(v), len(v)}
		switch role := wireEntryFields.role(num); {
		case !check:
			if role == wireKey {
				key = sp
			} else {
				value = sp
			}
		case !utf8.Valid(v):
			return span{}, span{}, false
		case role == wireKey && !hasKey:
			key, hasKey = sp, true
		case role == wireValue && !hasValue:
			value, hasValue = sp, true
		default:
			return span{}, span{}, false
		}
	}
	return key, value, true
}
