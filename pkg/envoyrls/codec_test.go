package envoyrls

import (
	"context"
	"net"
	"testing"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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
		gs := grpc.NewServer(opts...)
		rlsv3.RegisterRateLimitServiceServer(gs, srv)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go gs.Serve(lis)
		t.Cleanup(gs.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
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
