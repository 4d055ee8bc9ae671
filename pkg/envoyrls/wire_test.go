package envoyrls

import (
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// mustMarshal is proto.Marshal, failing t on error.
func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDecode decodes b with decodeRequest into a request holding stale
// data and reports whether it did; when it did, the result must equal
// proto.Unmarshal's.
func checkDecode(t testing.TB, b []byte) bool {
	t.Helper()
	got := &rlsv3.RateLimitRequest{Domain: "stale", HitsAddend: 9, Descriptors: []*rlv3.RateLimitDescriptor{{}}}
	if !decodeRequest(b, got) {
		if got.Domain != "stale" || got.HitsAddend != 9 || len(got.Descriptors) != 1 {
			t.Fatalf("a request it declined was changed: %v", got)
		}
		return false
	}
	var want rlsv3.RateLimitRequest
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatalf("decoded what proto refuses (%v): %x", err, b)
	}
	if !proto.Equal(got, &want) {
		t.Fatalf("decoded %v, proto decodes %v", got, &want)
	}
	return true
}

func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	entryAt := func(num protowire.Number) []byte {
		var e []byte
		e = protowire.AppendString(tag(e, num, protowire.BytesType), "k")
		return protowire.AppendBytes(tag(nil, wireDescriptorEntries, protowire.BytesType), e)
	}
	descriptorOf := func(d []byte) []byte {
		return protowire.AppendBytes(tag([]byte{0x0a, 0x01, 'x'}, wireRequestDescriptors, protowire.BytesType), d)
	}
	tests := []struct {
		name string
		wire []byte
		ok   bool // decodeRequest decodes it (else proto does)
	}{
		{"empty", nil, true},
		{"one descriptor", wireRequest("api", [][2]string{{"api_key", "alice"}}), true},
		{"three descriptors", wireRequest("api", [][2]string{{"k", "a"}}, [][2]string{{"ip", "1.2.3.4"}}, [][2]string{{"k", "a"}, {"path", "/x"}}), true},
		{"empty strings and descriptor", wireRequest("", [][2]string{}, [][2]string{{"", ""}}), true},
		{"hits only", protowire.AppendVarint(tag(nil, wireRequestHits, protowire.VarintType), 7), true},
		{"hits at uint32's end", protowire.AppendVarint(tag(nil, wireRequestHits, protowire.VarintType), 1<<32-1), true},
		{"overlong varint", append(tag(nil, wireRequestHits, protowire.VarintType), 0x85, 0x80, 0x00), true},
		{"empty entry", descriptorOf(protowire.AppendBytes(tag(nil, wireDescriptorEntries, protowire.BytesType), nil)), true},
		{"value before key", descriptorOf(append(entryAt(wireEntryValue), entryAt(wireEntryKey)...)), true},
		{"most descriptors and entries", wireRequest("api", many(wireMaxDescriptors, 2)...), true},
		// Declined: proto decodes these (or refuses them) itself.
		{"too many descriptors", wireRequest("api", many(wireMaxDescriptors+1, 1)...), false},
		{"too many entries", wireRequest("api", many(1, wireMaxEntries+1)...), false},
		{"hits past uint32 (proto truncates)", protowire.AppendVarint(tag(nil, wireRequestHits, protowire.VarintType), 1<<32), false},
		{"domain twice (proto keeps the last)", append(wireRequest("a"), wireRequest("b")...), false},
		{"hits twice", protowire.AppendVarint(tag(protowire.AppendVarint(tag(nil, 3, 0), 1), 3, 0), 2), false},
		{"key twice", descriptorOf(protowire.AppendBytes(tag(nil, wireDescriptorEntries, protowire.BytesType),
			protowire.AppendString(tag(protowire.AppendString(tag(nil, 1, 2), "a"), 1, 2), "b"))), false},
		{"invalid UTF-8 value", wireRequest("api", [][2]string{{"api_key", "caf\xe9"}}), false},
		{"invalid UTF-8 domain", wireRequest("\xff", [][2]string{{"k", "v"}}), false},
		{"limit override", descriptorOf(protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{0x08, 0x05})), false},
		{"descriptor hits_addend", descriptorOf(protowire.AppendBytes(tag(nil, 3, protowire.BytesType), []byte{0x08, 0x02})), false},
		{"descriptor is_negative_hits", descriptorOf(protowire.AppendVarint(tag(nil, 4, protowire.VarintType), 1)), false},
		{"unknown request field", protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 1), false},
		{"unknown entry field", descriptorOf(entryAt(3)), false},
		{"domain as varint", protowire.AppendVarint(tag(nil, wireRequestDomain, protowire.VarintType), 1), false},
		{"fixed32 field", protowire.AppendFixed32(tag(nil, 9, protowire.Fixed32Type), 1), false},
		{"truncated", []byte{0x0a, 0x05, 'x'}, false},
		{"bad tag", []byte{0x00}, false},
		{"truncated descriptor", []byte{0x12, 0x80}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkDecode(t, tt.wire); got != tt.ok {
				t.Errorf("decodeRequest took it: %v, want %v", got, tt.ok)
			}
			// Whoever decodes it, Codec answers as proto (TestCodecMapsInvalidUTF8 covers the mapped UTF-8).
			checkCodecAsProto(t, tt.wire, &rlsv3.RateLimitRequest{}, &rlsv3.RateLimitRequest{}, fixRequest)
		})
	}
}

// checkCodecAsProto: whoever decodes wire, Codec answers as proto does, into
// viaCodec and viaProto (two empty messages of one type), but where fix
// maps invalid UTF-8, which the UTF-8 tests cover.
func checkCodecAsProto(t *testing.T, wire []byte, viaCodec, viaProto proto.Message, fix func([]byte) ([]byte, bool)) {
	t.Helper()
	errCodec := NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, viaCodec)
	if errProto := proto.Unmarshal(wire, viaProto); errProto == nil && (errCodec != nil || !proto.Equal(viaCodec, viaProto)) {
		t.Errorf("Codec: %v, %v; proto: %v", viaCodec, errCodec, viaProto)
	} else if _, fixed := fix(wire); errProto != nil && errCodec == nil && !fixed {
		t.Errorf("Codec decoded what proto refuses: %v", errProto)
	}
}

// TestWireFieldsMatchProto: the request and report decoders' field lists
// (wire.go, reports.go) name every field of the messages they read, as the
// protos declare them, and each handled field has the kind the decoder
// reads it as. A field that a
// go-control-plane upgrade adds fails here until it is handled or declined.
func TestWireFieldsMatchProto(t *testing.T) {
	t.Parallel()
	kinds := map[wireRole]protoreflect.Kind{
		wireDomain:     protoreflect.StringKind,
		wireDescriptor: protoreflect.MessageKind,
		wireHits:       protoreflect.Uint32Kind,
		wireEntry:      protoreflect.MessageKind,
		wireKey:        protoreflect.StringKind,
		wireValue:      protoreflect.StringKind,
		// The usage report's (reports.go).
		wireReportDomain: protoreflect.StringKind,
		wireUsage:        protoreflect.MessageKind,
		wireBucketID:     protoreflect.MessageKind,
		wireElapsed:      protoreflect.MessageKind,
		wireAllowed:      protoreflect.Uint64Kind,
		wireDenied:       protoreflect.Uint64Kind,
		wireBucket:       protoreflect.MessageKind,
		wireSeconds:      protoreflect.Int64Kind,
		wireNanos:        protoreflect.Int32Kind,
	}
	usage := (&rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{}).ProtoReflect().Descriptor()
	bucketID := (&rlqsv3.BucketId{}).ProtoReflect().Descriptor()
	// The bucket map's entry message, whose key and value wireEntryFields reads.
	bucketEntry := bucketID.Fields().ByName("bucket").Message()
	// What a handled message field holds: the next message the decoder reads.
	msgs := map[wireRole]protoreflect.FullName{
		wireDescriptor: (&rlv3.RateLimitDescriptor{}).ProtoReflect().Descriptor().FullName(),
		wireEntry:      (&rlv3.RateLimitDescriptor_Entry{}).ProtoReflect().Descriptor().FullName(),
		wireUsage:      usage.FullName(),
		wireBucketID:   bucketID.FullName(),
		wireElapsed:    (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName(),
		wireBucket:     bucketEntry.FullName(),
	}
	tests := []struct {
		md     protoreflect.MessageDescriptor
		fields wireFields
	}{
		{(&rlsv3.RateLimitRequest{}).ProtoReflect().Descriptor(), wireRequestFields},
		{(&rlv3.RateLimitDescriptor{}).ProtoReflect().Descriptor(), wireDescriptorFields},
		{(&rlv3.RateLimitDescriptor_Entry{}).ProtoReflect().Descriptor(), wireEntryFields},
		{(&rlqsv3.RateLimitQuotaUsageReports{}).ProtoReflect().Descriptor(), wireReportsFields},
		{usage, wireUsageFields},
		{bucketID, wireBucketIDFields},
		{bucketEntry, wireEntryFields},
		{(&durationpb.Duration{}).ProtoReflect().Descriptor(), wireDurationFields},
	}
	for _, tt := range tests {
		md := tt.md
		t.Run(string(md.Name()), func(t *testing.T) {
			listed := map[protowire.Number]bool{}
			for _, f := range tt.fields {
				if listed[f.num] {
					t.Errorf("field %d listed twice", f.num)
				}
				listed[f.num] = true
				fd := md.Fields().ByNumber(f.num)
				switch {
				case fd == nil:
					t.Errorf("field %d (%s) is listed, but %s has no such field", f.num, f.name, md.FullName())
					continue
				case fd.Name() != f.name:
					t.Errorf("field %d is %s in the proto, listed as %s", f.num, fd.Name(), f.name)
				}
				if f.role == wireDecline {
					continue
				}
				if want, ok := kinds[f.role]; !ok || fd.Kind() != want {
					t.Errorf("field %s is a %v, decoded as %v", fd.Name(), fd.Kind(), want)
				}
				if want := msgs[f.role]; want != "" && fd.Message().FullName() != want {
					t.Errorf("field %s holds %s, decoded as %s", fd.Name(), fd.Message().FullName(), want)
				}
			}
			fds := md.Fields()
			for i := range fds.Len() {
				if fd := fds.Get(i); !listed[fd.Number()] {
					t.Errorf("%s has field %d (%s), which the request decoder neither handles nor declines: add it to its list in wire.go or reports.go",
						md.FullName(), fd.Number(), fd.Name())
				}
			}
		})
	}
}

// many is n descriptors of m entries each.
func many(n, m int) [][][2]string {
	ds := make([][][2]string, n)
	for i := range ds {
		for j := range m {
			ds[i] = append(ds[i], [2]string{fmt.Sprint("k", j), fmt.Sprint("v", i)})
		}
	}
	return ds
}

// TestDecodeRequestKeepsEntriesApart: the descriptors' entries share one
// slice, so an append to one descriptor's must not write over the next's.
func TestDecodeRequestKeepsEntriesApart(t *testing.T) {
	t.Parallel()
	var req rlsv3.RateLimitRequest
	if !decodeRequest(wireRequest("api", [][2]string{{"a", "1"}}, [][2]string{{"b", "2"}}), &req) {
		t.Fatal("declined")
	}
	d0 := req.Descriptors[0]
	d0.Entries = append(d0.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "x"})
	if e := req.Descriptors[1].Entries[0]; e.Key != "b" || e.Value != "2" {
		t.Errorf("second descriptor's entry became %v", e)
	}
}

// FuzzDecodeRequest: any bytes: no panic, and whatever decodeRequest takes
// it decodes exactly as proto does.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(wireRequest("api", [][2]string{{"api_key", "alice"}}))
	f.Add(wireRequest("a", [][2]string{{"k", "v"}, {"p", "/x"}}, [][2]string{}))
	f.Add(wireRequest("api", [][2]string{{"api_key", "caf\xe9"}}))
	f.Add(mustMarshal(f, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{
		desc("k", "v"),
		{Entries: desc("k", "v").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}},
	}}))
	f.Add([]byte{0x0a, 0x05, 'x'})
	f.Add([]byte{0x12, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
	})
}
