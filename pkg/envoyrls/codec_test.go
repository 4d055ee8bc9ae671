package envoyrls

import (
	"bytes"
	"context"
	"testing"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// wireRequest encodes a RateLimitRequest by hand, so its strings can hold
// bytes that proto.Marshal would refuse, as Envoy's C++ encoder sends them.
func wireRequest(domain string, descriptors ...[][2]string) []byte {
	var b []byte
	b = protowire.AppendTag(b, wireRequestDomain, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, d := range descriptors {
		var db []byte
		for _, e := range d {
			var eb []byte
			eb = protowire.AppendTag(eb, wireEntryKey, protowire.BytesType)
			eb = protowire.AppendString(eb, e[0])
			eb = protowire.AppendTag(eb, wireEntryValue, protowire.BytesType)
			eb = protowire.AppendString(eb, e[1])
			db = protowire.AppendTag(db, wireDescriptorEntries, protowire.BytesType)
			db = protowire.AppendBytes(db, eb)
		}
		b = protowire.AppendTag(b, wireRequestDescriptors, protowire.BytesType)
		b = protowire.AppendBytes(b, db)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType) // hits_addend
	return protowire.AppendVarint(b, 1)
}

func TestCodecMapsInvalidUTF8(t *testing.T) {
	t.Parallel()
	c := NewCodec()
	tests := []struct {
		name        string
		wire        []byte
		domain, key string
		value       string
	}{
		{"valid is untouched", wireRequest("api", [][2]string{{"api_key", "zoë"}}), "api", "api_key", "zoë"},
		{"latin-1 value", wireRequest("api", [][2]string{{"api_key", "caf\xe9"}}), "api", "api_key", "caf\uf7e9"},
		{"invalid key and domain", wireRequest("a\xffb", [][2]string{{"k\x80", "v"}}), "a\uf7ffb", "k\uf780", "v"},
		{"truncated rune", wireRequest("api", [][2]string{{"api_key", "\xe2\x82"}}), "api", "api_key", "\uf7e2\uf782"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req rlsv3.RateLimitRequest
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.wire)}, &req); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			e := req.Descriptors[0].Entries[0]
			if req.Domain != tt.domain || e.Key != tt.key || e.Value != tt.value || req.HitsAddend != 1 {
				t.Errorf("got %q %q=%q hits %d, want %q %q=%q hits 1", req.Domain, e.Key, e.Value, req.HitsAddend, tt.domain, tt.key, tt.value)
			}
		})
	}
	// Other messages and garbage still fail as before.
	var req rlsv3.RateLimitRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 'x'})}, &req); err == nil {
		t.Error("truncated message decoded")
	}
}

// rawCodec sends and receives bytes as they are.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// TestInvalidUTF8IsCountedOverGRPC: over a real gRPC connection, a request
// with a Latin-1 API key is refused by gRPC's own codec (Internal: Envoy
// would let it through) and counted with ours, apart from other values.
func TestInvalidUTF8IsCountedOverGRPC(t *testing.T) {
	t.Parallel()
	rules := "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	call := func(t *testing.T, opts []grpc.ServerOption, value string) (rlsv3.RateLimitResponse_Code, error) {
		srv, err := NewServer(Options{Store: window.NewMemory(), Rules: mustRules(t, rules)})
		if err != nil {
			t.Fatal(err)
		}
		conn := serveLoopback(t, srv, opts...)
		var last rlsv3.RateLimitResponse_Code
		for _, v := range []string{value, value + "\xfe", value} {
			in, out := wireRequest("api", [][2]string{{"api_key", v}}), []byte(nil)
			err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &in, &out, grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				return 0, err
			}
			var resp rlsv3.RateLimitResponse
			if err := proto.Unmarshal(out, &resp); err != nil {
				t.Fatal(err)
			}
			if v == value+"\xfe" && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Errorf("a different invalid value shares the counter: %v", resp.OverallCode)
			}
			last = resp.OverallCode
		}
		return last, nil
	}
	if _, err := call(t, nil, "caf\xe9"); status.Code(err) != codes.Internal {
		t.Fatalf("gRPC's own codec: err = %v, want Internal (the bypass this codec closes)", err)
	}
	code, err := call(t, []grpc.ServerOption{grpc.ForceServerCodecV2(NewCodec())}, "caf\xe9")
	if err != nil || code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("with Codec: second call with the same key = %v, %v, want OVER_LIMIT", code, err)
	}
}

// FuzzFixRequest: any bytes: no panic; what decodes after fixing has valid
// strings; a request that already decoded is left alone.
func FuzzFixRequest(f *testing.F) {
	f.Add(wireRequest("api", [][2]string{{"api_key", "caf\xe9"}}))
	f.Add(wireRequest("a", [][2]string{{"k", "v"}, {"p", "/\xff"}}))
	f.Add([]byte{0x0a, 0x05, 'x'})
	f.Add([]byte{0x12, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		fixed, changed := fixRequest(b)
		var before rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &before) == nil && changed {
			t.Fatalf("a request that decoded was rewritten")
		}
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(fixed, &req) != nil {
			return
		}
		check := func(s string) {
			if !utf8.ValidString(s) {
				t.Fatalf("fixed string %q is not UTF-8", s)
			}
		}
		check(req.Domain)
		for _, d := range req.Descriptors {
			for _, e := range d.Entries {
				check(e.Key)
				check(e.Value)
			}
		}
	})
}

// FuzzFixReports: fixReports never panics and never rewrites an RLQS
// report that decodes as it is.
func FuzzFixReports(f *testing.F) {
	f.Add([]byte("\x0a\x04edge\x12\x10\x0a\x0c\x0a\x0a\x0a\x04user\x12\x02\xe9x\x18\x07"))
	f.Add([]byte{0x0a, 0x01, 0xff})
	f.Add([]byte{0x12, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, changed := fixReports(b)
		var before rlqsv3.RateLimitQuotaUsageReports
		if proto.Unmarshal(b, &before) == nil && changed {
			t.Fatalf("a report that decoded was rewritten")
		}
	})
}

// vtCompiled reports whether go-control-plane's generated encoders are
// compiled in (go test -tags vtprotobuf). Without them Codec.Marshal is
// proto's, which the tests below check too.
var vtCompiled = GeneratedEncoder()

// checkMarshal encodes r with Codec and with proto.Marshal: both must fail,
// or write the same bytes. It reports whether the generated encoder took r.
func checkMarshal(t testing.TB, r *rlsv3.RateLimitResponse) bool {
	t.Helper()
	want, errProto := proto.Marshal(r)
	data, err := NewCodec().Marshal(r)
	defer data.Free()
	if (err != nil) != (errProto != nil) {
		t.Fatalf("Codec.Marshal: %v; proto.Marshal: %v", err, errProto)
	}
	if got := data.Materialize(); err == nil && !bytes.Equal(got, want) {
		t.Fatalf("Codec.Marshal:\n%x\nproto.Marshal:\n%x", got, want)
	}
	vt := vtCompiled && vtEncodable(r)
	if vt && errProto != nil {
		t.Fatalf("the generated encoder took what proto.Marshal refuses: %v", errProto)
	}
	return vt
}

func TestCodecMarshal(t *testing.T) {
	t.Parallel()
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "per key", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE,
		UnitMultiplier: wrapperspb.UInt32(5)}
	unknownField := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	withUnknown := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown(unknownField)
		return m
	}
	tests := []struct {
		name string
		resp *rlsv3.RateLimitResponse
		vt   bool // the generated encoder, when compiled in, takes it (else proto)
	}{
		{"empty", &rlsv3.RateLimitResponse{}, true},
		{"empty status", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}}}, true},
		{"zero multiplier and duration", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(0)}, DurationUntilReset: &durationpb.Duration{}}}}, true},
		{"negative enum and nanos", &rlsv3.RateLimitResponse{OverallCode: -1, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: -2, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Unit: -3}, DurationUntilReset: &durationpb.Duration{Seconds: -1, Nanos: -5}}}}, true},
		{"large values", &rlsv3.RateLimitResponse{OverallCode: 2, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: 2, CurrentLimit: limit, LimitRemaining: 1<<32 - 1, DurationUntilReset: &durationpb.Duration{Seconds: 1 << 62, Nanos: 999999999}}}}, true},
		{"headers and body", &rlsv3.RateLimitResponse{OverallCode: 2,
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "retry-after", Value: "3"}, {Key: "x", RawValue: []byte{0xff, 0}}, {}},
			RawBody:              bytes.Repeat([]byte("b"), 300)}, true},
		{"a large response, from gRPC's pool", &rlsv3.RateLimitResponse{RawBody: bytes.Repeat([]byte("b"), 70000)}, true},
		{"nil status", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}}, true},
		{"nil header", &rlsv3.RateLimitResponse{ResponseHeadersToAdd: []*corev3.HeaderValue{nil}}, true},
		{"unknown fields", withUnknown(&rlsv3.RateLimitResponse{
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{withUnknown(&rlsv3.RateLimitResponse_DescriptorStatus{
				CurrentLimit: withUnknown(&rlsv3.RateLimitResponse_RateLimit{Name: "n"}).(*rlsv3.RateLimitResponse_RateLimit),
			}).(*rlsv3.RateLimitResponse_DescriptorStatus)},
			ResponseHeadersToAdd: []*corev3.HeaderValue{withUnknown(&corev3.HeaderValue{Key: "k"}).(*corev3.HeaderValue)},
		}).(*rlsv3.RateLimitResponse), true},
		// Declined: proto encodes these (or refuses them) itself.
		{"request headers", &rlsv3.RateLimitResponse{RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k"}}}, false},
		{"quota", &rlsv3.RateLimitResponse{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}}, false},
		{"status quota", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{}}}}, false},
		{"invalid UTF-8 name", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "\xff"}}}}, false},
		{"invalid UTF-8 header", &rlsv3.RateLimitResponse{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "k", Value: "\xfe"}}}, false},
		{"unknown duration field", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			DurationUntilReset: withUnknown(&durationpb.Duration{Seconds: 1}).(*durationpb.Duration)}}}, false},
		{"unknown multiplier field", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: withUnknown(wrapperspb.UInt32(2)).(*wrapperspb.UInt32Value)}}}}, false},
		{"nil response", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkMarshal(t, tt.resp); got != (tt.vt && vtCompiled) {
				t.Errorf("the generated encoder took it: %v, want %v", got, tt.vt)
			}
		})
	}
}

// TestCodecMarshalServesTheServer: every kind of answer the server gives
// (allowed, over a limit with its 429 headers and body, an override with a
// multiplier, a sliding window, a failed store that denies) is encoded by
// the generated encoder (when compiled in), as proto would.
func TestCodecMarshalServesTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// testRules, and a limit that denies when its store fails.
	rules := mustRules(t, testRules+"  - key: closed\n    failure_mode: deny\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	now := func() time.Time { return t0 }
	srv, err := NewServer(Options{Store: window.NewMemory(), Rules: rules, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	failing, err := NewServer(Options{Store: failingStore{}, Rules: rules, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	override := desc("api_key", "o")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	reqs := []*rlsv3.RateLimitRequest{
		{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "alice")}},
		{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "bob"), desc("multi", "m"), desc("sliding", "s"), desc("nothing", "n")}},
		{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("closed", "c"), desc("api_key", "dave", "path", "/p")}},
		{Domain: "api", HitsAddend: 1000, Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "carol")}},
		{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{override}},
		{Domain: "unknown", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}},
	}
	var over bool
	for _, s := range []*Server{srv, failing} {
		for range 3 { // repeated, so that limits fill up and 429s come
			for _, req := range reqs {
				resp, err := s.ShouldRateLimit(ctx, req)
				if err != nil {
					continue // failure mode "error": no response to encode
				}
				over = over || len(resp.ResponseHeadersToAdd) > 0
				if !checkMarshal(t, resp) && vtCompiled {
					t.Errorf("a response to %v went to proto: %v", req, resp)
				}
			}
		}
	}
	if !over {
		t.Error("no response carried 429 headers: the test lost its over-limit case")
	}
}

// FuzzCodecMarshal: any response of the fields the server sets encodes as
// proto encodes it, and goes to proto only when proto refuses it.
func FuzzCodecMarshal(f *testing.F) {
	f.Add(int32(1), uint8(1), "per key", uint32(10), int32(2), uint32(0), false, uint32(9), int64(60), int32(0), "", "", []byte(nil), []byte(nil))
	f.Add(int32(2), uint8(3), "", uint32(1<<31), int32(-1), uint32(7), true, uint32(0), int64(-5), int32(-1), "retry-after", "3", []byte{0xff}, []byte(`{"error":"x"}`))
	f.Add(int32(0), uint8(0), "\xff", uint32(0), int32(0), uint32(0), false, uint32(0), int64(0), int32(0), "k\xfe", "", []byte(nil), []byte(nil))
	f.Fuzz(func(t *testing.T, code int32, n uint8, name string, rpu uint32, unit int32, mult uint32, useMult bool,
		remaining uint32, secs int64, nanos int32, hk, hv string, raw, body []byte) {
		r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(code), RawBody: body}
		for i := range int(n % 5) {
			st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(code + int32(i)), LimitRemaining: remaining}
			if i%2 == 0 {
				st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(unit)}
				if useMult {
					st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult)
				}
				st.DurationUntilReset = &durationpb.Duration{Seconds: secs, Nanos: nanos}
			}
			r.Statuses = append(r.Statuses, st)
		}
		if hk != "" || hv != "" || len(raw) > 0 {
			r.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: hk, Value: hv, RawValue: raw}}
		}
		if !checkMarshal(t, r) && vtCompiled {
			if _, err := proto.Marshal(r); err == nil {
				t.Fatalf("sent to proto a response the generated encoder takes: %v", r)
			}
		}
	})
}

// BenchmarkCodec compares Codec (the hand-written request decoder, the
// generated response encoder) with proto's, on scenario (a)'s request and an
// allowed answer to it.
func BenchmarkCodec(b *testing.B) {
	reqWire := wireRequest("bench", [][2]string{{"api_key", "key-123"}})
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "per key", RequestsPerUnit: 1000000, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
		LimitRemaining:     999000,
		DurationUntilReset: &durationpb.Duration{Seconds: 42},
	}}}
	b.Run("request/wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if !decodeRequest(reqWire, &req) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("request/proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := proto.Unmarshal(reqWire, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	codec := NewCodec()
	b.Run("response/wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := codec.Marshal(resp)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	b.Run("response/proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := codec.proto.Marshal(resp)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
}

// BenchmarkDecodeReports compares decodeReports with proto.Unmarshal on a
// report of 500 one-entry buckets, the bench fleet's per-Envoy report.
func BenchmarkDecodeReports(b *testing.B) {
	wire := mustMarshal(b, usageReport("bench", oneEntryBuckets(500)...))
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r rlqsv3.RateLimitQuotaUsageReports
			if !decodeReports(wire, &r) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r rlqsv3.RateLimitQuotaUsageReports
			if err := proto.Unmarshal(wire, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestGeneratedEncoder checks that the probe agrees with the build: the
// generated encoder is there exactly when the vtprotobuf tag is set.
func TestGeneratedEncoder(t *testing.T) {
	if got := GeneratedEncoder(); got != vtprotobufTag {
		t.Errorf("GeneratedEncoder() = %v, want %v (the vtprotobuf build tag)", got, vtprotobufTag)
	}
}

// TestCodecMapsInvalidUTF8InReports: an RLQS report whose bucket_id holds
// bytes that are not UTF-8 (Envoy copies header bytes) decodes with them
// mapped, as a RateLimitRequest's, instead of failing the whole stream;
// valid reports decode as proto does.
func TestCodecMapsInvalidUTF8InReports(t *testing.T) {
	t.Parallel()
	usage := func(k, v string) []byte {
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), k)
		entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), v)
		id := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
		u := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), id)
		return protowire.AppendVarint(protowire.AppendTag(u, 3, protowire.VarintType), 7)
	}
	report := func(domain string, usages ...[]byte) []byte {
		b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), domain)
		for _, u := range usages {
			b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), u)
		}
		return b
	}
	c := NewCodec()
	for _, tt := range []struct {
		in         []byte
		domain     string
		key, value string
	}{
		{report("edge", usage("user", "alice")), "edge", "user", "alice"},
		{report("edge", usage("user", "caf\xe9")), "edge", "user", "caf\uf7e9"},
		{report("ed\xffge", usage("us\xfer", "x")), "ed\uf7ffge", "us\uf7fer", "x"},
	} {
		var r rlqsv3.RateLimitQuotaUsageReports
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.in)}, &r); err != nil {
			t.Errorf("Unmarshal(%q) = %v", tt.in, err)
			continue
		}
		u := r.GetBucketQuotaUsages()
		if r.Domain != tt.domain || len(u) != 1 || u[0].GetBucketId().GetBucket()[tt.key] != tt.value || u[0].GetNumRequestsAllowed() != 7 {
			t.Errorf("Unmarshal(%q) = %v, want domain %q, bucket {%q: %q}, 7 allowed", tt.in, &r, tt.domain, tt.key, tt.value)
		}
	}
}

// checkMarshalQuota encodes r with Codec and with proto.Marshal: both must
// fail, or encode the same message, in the same bytes when no bucket_id has
// more than one entry (neither encoder orders a map's entries). It reports
// whether the generated encoder took r.
func checkMarshalQuota(t testing.TB, r *rlqsv3.RateLimitQuotaResponse) bool {
	t.Helper()
	want, errProto := proto.Marshal(r)
	data, err := NewCodec().Marshal(r)
	defer data.Free()
	if (err != nil) != (errProto != nil) {
		t.Fatalf("Codec.Marshal: %v; proto.Marshal: %v", err, errProto)
	}
	if err == nil {
		got := data.Materialize()
		ordered := true
		for _, a := range r.GetBucketAction() {
			ordered = ordered && len(a.GetBucketId().GetBucket()) <= 1
		}
		if ordered && !bytes.Equal(got, want) {
			t.Fatalf("Codec.Marshal:\n%x\nproto.Marshal:\n%x", got, want)
		}
		var back, wantBack rlqsv3.RateLimitQuotaResponse
		if err := proto.Unmarshal(got, &back); err != nil {
			t.Fatalf("Codec.Marshal's bytes do not decode: %v", err)
		}
		if err := proto.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, &wantBack) {
			t.Fatalf("Codec.Marshal encodes %v, proto.Marshal %v", &back, &wantBack)
		}
	}
	vt := vtCompiled && vtEncodableQuota(r)
	if vt && errProto != nil {
		t.Fatalf("the generated encoder took what proto.Marshal refuses: %v", errProto)
	}
	return vt
}

// quotaAction is an RLQS bucket action assigning strategy to bucket for ttl.
func quotaAction(bucket map[string]string, ttl *durationpb.Duration, strategy *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: bucket},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl, RateLimitStrategy: strategy}},
	}
}

func tokenBucketStrategy(max uint32, perFill *wrapperspb.UInt32Value, fill *durationpb.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{MaxTokens: max, TokensPerFill: perFill, FillInterval: fill}}}
}

// TestCodecMarshalQuota: the RLQS answers the server sends (token buckets,
// blanket rules, abandon actions) go to the generated encoder, which
// encodes them as proto does; what it would not (invalid UTF-8, unknown
// fields of well-known types) goes to proto.
func TestCodecMarshalQuota(t *testing.T) {
	t.Parallel()
	unknownField := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	withUnknown := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown(unknownField)
		return m
	}
	user := map[string]string{"user": "alice"}
	ttl := durationpb.New(15 * time.Second)
	day := durationpb.New(24 * time.Hour)
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	abandon := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: user},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
	tests := []struct {
		name string
		resp *rlqsv3.RateLimitQuotaResponse
		vt   bool // the generated encoder, when compiled in, takes it (else proto)
	}{
		{"empty", &rlqsv3.RateLimitQuotaResponse{}, true},
		{"token bucket", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(user, ttl, tokenBucketStrategy(40, wrapperspb.UInt32(86400), day))}}, true},
		{"blanket rule, abandon, and a bucket of two entries", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(map[string]string{"user": "bob", "path": "/p"}, ttl, deny), abandon}}, true},
		{"empty key and value", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(map[string]string{"": ""}, &durationpb.Duration{}, tokenBucketStrategy(0, wrapperspb.UInt32(0), &durationpb.Duration{}))}}, true},
		{"requests per time unit", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(user, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
				RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 5, TimeUnit: typev3.RateLimitUnit_SECOND}}})}}, true},
		{"nil parts", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			nil, {}, quotaAction(nil, nil, nil), quotaAction(user, ttl, tokenBucketStrategy(1, nil, nil))}}, true},
		{"unknown fields of generated messages", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			withUnknown(quotaAction(user, ttl, deny)).(*rlqsv3.RateLimitQuotaResponse_BucketAction)}}, true},
		// Declined: proto encodes these (or refuses them) itself.
		{"invalid UTF-8 key", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(map[string]string{"\xff": "v"}, ttl, deny)}}, false},
		{"invalid UTF-8 value", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(map[string]string{"user": "caf\xe9"}, ttl, deny)}}, false},
		{"unknown TTL field", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(user, withUnknown(durationpb.New(time.Second)).(*durationpb.Duration), deny)}}, false},
		{"unknown fill_interval field", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(user, ttl, tokenBucketStrategy(2, wrapperspb.UInt32(1), withUnknown(durationpb.New(time.Second)).(*durationpb.Duration)))}}, false},
		{"unknown tokens_per_fill field", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			quotaAction(user, ttl, tokenBucketStrategy(2, withUnknown(wrapperspb.UInt32(1)).(*wrapperspb.UInt32Value), day))}}, false},
		{"nil response", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkMarshalQuota(t, tt.resp); got != (tt.vt && vtCompiled) {
				t.Errorf("the generated encoder took it: %v, want %v", got, tt.vt)
			}
		})
	}
}

// FuzzCodecMarshalQuota: any RLQS answer of the fields the server sets
// encodes as proto encodes it, and goes to proto only when proto refuses it.
func FuzzCodecMarshalQuota(f *testing.F) {
	f.Add(uint8(3), "user", "alice", int64(15), int32(0), uint8(0), uint32(40), uint32(86400), int64(86400), int32(0), int32(1))
	f.Add(uint8(1), "\xff", "", int64(-1), int32(-5), uint8(1), uint32(0), uint32(0), int64(0), int32(-1), int32(-3))
	f.Add(uint8(7), "k", "v\xfe", int64(1<<62), int32(999999999), uint8(4), uint32(1<<31), uint32(1), int64(-7), int32(7), int32(2))
	f.Fuzz(func(t *testing.T, n uint8, k, v string, ttlSecs int64, ttlNanos int32, kind uint8, max, perFill uint32, fillSecs int64, fillNanos, blanket int32) {
		r := &rlqsv3.RateLimitQuotaResponse{}
		for i := range int(n % 6) {
			bucket := map[string]string{k: v}
			if i%3 == 1 {
				bucket["second"] = v + k
			}
			ttl := &durationpb.Duration{Seconds: ttlSecs, Nanos: ttlNanos}
			var a *rlqsv3.RateLimitQuotaResponse_BucketAction
			switch (int(kind) + i) % 5 {
			case 0:
				a = quotaAction(bucket, ttl, tokenBucketStrategy(max, wrapperspb.UInt32(perFill), &durationpb.Duration{Seconds: fillSecs, Nanos: fillNanos}))
			case 1:
				a = quotaAction(bucket, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_BlanketRule(blanket)}})
			case 2:
				a = &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: bucket},
					BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
			case 3:
				a = quotaAction(bucket, nil, tokenBucketStrategy(max, nil, nil))
			default:
				a = quotaAction(bucket, ttl, nil)
			}
			r.BucketAction = append(r.BucketAction, a)
		}
		if !checkMarshalQuota(t, r) && vtCompiled {
			if _, err := proto.Marshal(r); err == nil {
				t.Fatalf("sent to proto an answer the generated encoder takes: %v", r)
			}
		}
	})
}
