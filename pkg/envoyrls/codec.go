package envoyrls

import (
	"fmt"
	"unicode/utf8"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Codec is the gRPC codec to serve with (grpc.ForceServerCodecV2): gRPC's
// own proto codec, except that the usual RateLimitRequest goes through
// wire.go's hand-written decoder (the usual RLQS usage report through
// reports.go's) and the usual RateLimitResponse and RLQS
// answer through go-control-plane's generated encoder (the same messages and bytes as
// proto's, for less CPU and fewer allocations), and that RateLimitRequests
// (and RLQS usage reports) whose strings are not valid UTF-8 are decoded.
//
// Envoy copies header bytes into descriptor values as they are, so an
// x-api-key of Latin-1 bytes arrives as a proto3 string that is not UTF-8.
// Go's protobuf refuses to decode it and gRPC answers Internal before any
// handler runs; Envoy then fails open, and a client could escape its limit
// just by sending such bytes. Codec instead maps each invalid byte b to the
// private-use rune U+F700+b (U+F780 to U+F7FF) and decodes again, so the
// request is counted, and valid requests cost nothing extra.
//
// Distinct values keep distinct counters, but for one case: a valid value
// that holds such a rune shares its counter with the invalid bytes that map
// to it ("caf\uf7e9" with "caf\xe9"). That only merges counts, so more is
// counted, never less, and a mapped value matches no rule that the valid
// one would not: no limit can be escaped this way.
type Codec struct {
	proto encoding.CodecV2
}

// NewCodec returns a Codec over gRPC's registered proto codec.
func NewCodec() Codec {
	return Codec{proto: encoding.GetCodecV2("proto")}
}

// Name is "proto", the content subtype the codec replaces.
func (c Codec) Name() string { return "proto" }

// Marshal encodes a RateLimitResponse (an RLQS RateLimitQuotaResponse)
// with go-control-plane's generated vtprotobuf encoder when it is compiled
// in and vtEncodable (vtEncodableQuota) reports that it writes
// proto.Marshal's bytes, and anything else with gRPC's proto marshalling. Like gRPC's codec, it takes a large buffer from gRPC's pool,
// which gRPC returns after the write.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	var vt vtMarshaler
	switch m := v.(type) {
	case *rlsv3.RateLimitResponse:
		if vtEncodable(m) { // false for nil
			vt, _ = any(m).(vtMarshaler)
		}
	case *rlqsv3.RateLimitQuotaResponse:
		if vtEncodableQuota(m) { // false for nil
			vt, _ = any(m).(vtMarshaler)
		}
	}
	if vt == nil {
		return c.proto.Marshal(v)
	}
	n := vt.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(n) {
		b := make([]byte, n)
		if _, err := vt.MarshalToSizedBufferVTStrict(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(n)
	if _, err := vt.MarshalToSizedBufferVTStrict((*buf)[:n]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// GeneratedEncoder reports whether this binary was built with the
// vtprotobuf build tag, so that Codec encodes responses with
// go-control-plane's generated code; without it Codec falls back to proto,
// with the same bytes and more CPU per response.
func GeneratedEncoder() bool {
	_, ok := any(&rlsv3.RateLimitResponse{}).(vtMarshaler)
	return ok
}

// vtMarshaler is the generated encoder of a go-control-plane message, which
// its module compiles only with the vtprotobuf build tag (the Makefile and
// the Dockerfile build with it); without the tag, Marshal uses proto for
// every message, with the same bytes.
type vtMarshaler interface {
	// SizeVT returns the size of the message's encoding.
	SizeVT() int
	// MarshalToSizedBufferVTStrict writes the encoding at the end of its
	// argument and returns its size.
	MarshalToSizedBufferVTStrict([]byte) (int, error)
}

// vtEncodable reports whether the generated encoder writes r as
// proto.Marshal would. It does not where it differs from proto: it writes
// strings that are not valid UTF-8, on which proto.Marshal fails, and drops
// the unknown fields of well-known types (a Duration or a UInt32Value).
// The parts this server never sets (request headers, dynamic metadata,
// quotas) go to proto too, so that only what it sends needs checking here.
func vtEncodable(r *rlsv3.RateLimitResponse) bool {
	if r == nil || len(r.RequestHeadersToAdd) > 0 || r.DynamicMetadata != nil || r.Quota != nil {
		return false
	}
	for _, st := range r.Statuses {
		if st == nil {
			continue
		}
		if st.Quota != nil {
			return false
		}
		if l := st.CurrentLimit; l != nil && (!utf8.ValidString(l.Name) ||
			l.UnitMultiplier != nil && unknown(l.UnitMultiplier)) {
			return false
		}
		if d := st.DurationUntilReset; d != nil && unknown(d) {
			return false
		}
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h != nil && (!utf8.ValidString(h.Key) || !utf8.ValidString(h.Value)) {
			return false
		}
	}
	return true
}

// vtEncodableQuota reports whether the generated encoder writes r, an RLQS
// answer, as proto.Marshal would, but for the order of a bucket_id's map
// entries, which neither promises. As for vtEncodable, it does not for
// strings that are not valid UTF-8 (bucket_id keys and values; the decoder
// maps Envoy's to valid ones, see Codec) and for unknown fields of the
// well-known types (the TTL, a token bucket's fill_interval and
// tokens_per_fill).
func vtEncodableQuota(r *rlqsv3.RateLimitQuotaResponse) bool {
	if r == nil {
		return false
	}
	for _, a := range r.BucketAction {
		for k, v := range a.GetBucketId().GetBucket() {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return false
			}
		}
		q := a.GetQuotaAssignmentAction()
		if d := q.GetAssignmentTimeToLive(); d != nil && unknown(d) {
			return false
		}
		tb := q.GetRateLimitStrategy().GetTokenBucket()
		if n := tb.GetTokensPerFill(); n != nil && unknown(n) {
			return false
		}
		if d := tb.GetFillInterval(); d != nil && unknown(d) {
			return false
		}
	}
	return true
}

// unknown reports whether m carries unknown fields.
func unknown(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }

// Unmarshal decodes a RateLimitRequest of the shape Envoy sends with
// decodeRequest, and anything else with gRPC's proto unmarshalling, with a
// second try for a RateLimitRequest whose strings were not valid UTF-8; see
// Codec. An RLQS usage report goes to unmarshalReports.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlqsv3.RateLimitQuotaUsageReports); ok {
		return c.unmarshalReports(data, r)
	}
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	// One buffer is used as it is, several are joined in a pooled one;
	// decoders copy what they keep.
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if decodeRequest(b, req) {
		return nil
	}
	err := proto.Unmarshal(b, req)
	if err == nil {
		return nil
	}
	fixed, changed := fixRequest(b)
	if !changed {
		return err
	}
	proto.Reset(req)
	if err2 := proto.Unmarshal(fixed, req); err2 != nil {
		return fmt.Errorf("%w (after mapping invalid UTF-8: %w)", err, err2)
	}
	return nil
}

// unmarshalReports decodes an RLQS usage report of the shape Envoy sends
// with decodeReports (reports.go), and any other with proto, with a second
// try when its strings were not valid UTF-8 (a bucket_id value Envoy took
// from a header): one such bucket must not end the stream of every bucket
// of that Envoy. The mapped bucket answers under the mapped id, which Envoy does
// not know, so that bucket alone stays on its no_assignment_behavior.
func (c Codec) unmarshalReports(data mem.BufferSlice, r *rlqsv3.RateLimitQuotaUsageReports) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if decodeReports(b, r) {
		return nil
	}
	err := proto.Unmarshal(b, r)
	if err == nil {
		return nil
	}
	fixed, changed := fixReports(b)
	if !changed {
		return err
	}
	proto.Reset(r)
	if err2 := proto.Unmarshal(fixed, r); err2 != nil {
		return fmt.Errorf("%w (after mapping invalid UTF-8: %w)", err, err2)
	}
	return nil
}

// fixReports rewrites a RateLimitQuotaUsageReports' wire bytes with its
// domain and every bucket_id key and value made valid UTF-8, as
// fixRequest does: domain 1, bucket_quota_usages 2, whose bucket_id 1,
// whose bucket 1 (map entries: key 1, value 2).
func fixReports(b []byte) ([]byte, bool) {
	return fixMessage(b, func(num protowire.Number, v []byte) ([]byte, bool) {
		switch num {
		case 1:
			return fixString(v)
		case 2:
			return fixMessage(v, func(num protowire.Number, v []byte) ([]byte, bool) {
				if num != 1 {
					return v, false
				}
				return fixMessage(v, func(num protowire.Number, v []byte) ([]byte, bool) {
					if num != 1 {
						return v, false
					}
					return fixMessage(v, func(num protowire.Number, v []byte) ([]byte, bool) {
						if num == 1 || num == 2 {
							return fixString(v)
						}
						return v, false
					})
				})
			})
		}
		return v, false
	})
}

// fixRequest rewrites a RateLimitRequest's wire bytes with every string
// made valid UTF-8; changed reports whether anything was rewritten. Bytes it
// cannot parse are copied as they are, for the decoder to reject.
func fixRequest(b []byte) (out []byte, changed bool) {
	return fixMessage(b, func(num protowire.Number, v []byte) ([]byte, bool) {
		switch wireRequestFields.role(num) {
		case wireDomain:
			return fixString(v)
		case wireDescriptor:
			return fixMessage(v, func(num protowire.Number, v []byte) ([]byte, bool) {
				if wireDescriptorFields.role(num) != wireEntry {
					return v, false
				}
				return fixMessage(v, func(num protowire.Number, v []byte) ([]byte, bool) {
					if r := wireEntryFields.role(num); r == wireKey || r == wireValue {
						return fixString(v)
					}
					return v, false
				})
			})
		}
		return v, false
	})
}

// fixMessage copies a message's fields, passing each length-delimited one
// through fix.
func fixMessage(b []byte, fix func(protowire.Number, []byte) ([]byte, bool)) ([]byte, bool) {
	out := make([]byte, 0, len(b)+8)
	changed := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return append(out, b...), changed
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return append(out, b...), changed
			}
			out = append(out, b[:n+m]...)
			b = b[n+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return append(out, b...), changed
		}
		fixed, c := fix(num, v)
		changed = changed || c
		out = protowire.AppendTag(out, num, typ)
		out = protowire.AppendBytes(out, fixed)
		b = b[n+m:]
	}
	return out, changed
}

// fixString maps each byte of s that is not part of valid UTF-8 to the rune
// U+F700 plus that byte.
func fixString(s []byte) ([]byte, bool) {
	if utf8.Valid(s) {
		return s, false
	}
	out := make([]byte, 0, len(s)+8)
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size <= 1 {
			out = utf8.AppendRune(out, 0xF700+rune(s[0]))
			s = s[1:]
			continue
		}
		out = append(out, s[:size]...)
		s = s[size:]
	}
	return out, true
}
