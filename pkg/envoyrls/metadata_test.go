package envoyrls

import (
	"bytes"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// metadataRules give descriptors metadata that overlaps: user's and
// peer's both set tier and a team struct.
const metadataRules = `
domain: m
descriptors:
  - key: user
    metadata: {tier: gold, team: {name: a, size: 3}}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: peer
    metadata: {tier: silver, owner: x, team: {name: z, lead: b}}
    rate_limits:
      - {unit: minute, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 50}
  - key: route
    quota_mode: true
    metadata: {route: r}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: old
    metadata: {old: true}
    rate_limit: {unit: minute, requests_per_unit: 5, name: old}
  - key: new
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: old}]}
  - key: free
    metadata: {free: yes}
    rate_limit: {unlimited: true}
  - key: plain
    metadata: {plain: p}
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDynamicMetadata: with Options.DynamicMetadata the response's
// dynamic_metadata has envoyproxy/ratelimit's fields (domain, descriptors
// with entries, limit and hitsAddend, the request's hitsAddend) and, under
// metadata, the metadata of the rules of the descriptors that passed,
// merged as the reference (f2fb157) merges them: the first descriptor to
// set a key wins, structs are merged. quotaModeViolations and
// quotaModeEnabled, which the reference sent before, stay. Without the
// option there is none.
func TestDynamicMetadata(t *testing.T) {
	t.Parallel()
	withHits := func(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	override := desc("user", "o")
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)}
	entries := func(e ...string) map[string]any {
		out := make([]any, len(e))
		for i, x := range e {
			out[i] = x
		}
		return map[string]any{"entries": out}
	}
	userMeta := map[string]any{"tier": "gold", "team": map[string]any{"name": "a", "size": 3.0}}
	tests := []struct {
		name  string
		off   bool // Options.DynamicMetadata false
		quota bool // Options.QuotaMode
		hits  uint32
		descs []*rlv3.RateLimitDescriptor
		want  map[string]any // nil: no dynamic_metadata
	}{
		{name: "off", off: true, descs: []*rlv3.RateLimitDescriptor{desc("user", "u")}},
		{name: "no rule", descs: []*rlv3.RateLimitDescriptor{desc("x", "y", "z", "")}, want: map[string]any{
			"domain":           "m",
			"descriptors":      []any{entries("x=y", "z=")},
			"quotaModeEnabled": false,
		}},
		{name: "first wins, structs merged", descs: []*rlv3.RateLimitDescriptor{desc("user", "u"), desc("peer", "p")}, want: map[string]any{
			"domain":      "m",
			"descriptors": []any{entries("user=u"), entries("peer=p")},
			"metadata": map[string]any{"tier": "gold", "owner": "x",
				"team": map[string]any{"name": "a", "size": 3.0, "lead": "b"}},
			"quotaModeEnabled": false,
		}},
		{name: "the other order", descs: []*rlv3.RateLimitDescriptor{desc("peer", "p"), desc("user", "u")}, want: map[string]any{
			"domain":      "m",
			"descriptors": []any{entries("peer=p"), entries("user=u")},
			"metadata": map[string]any{"tier": "silver", "owner": "x",
				"team": map[string]any{"name": "z", "size": 3.0, "lead": "b"}},
			"quotaModeEnabled": false,
		}},
		{name: "a spent quota descriptor did not pass", descs: []*rlv3.RateLimitDescriptor{desc("user", "u"), withHits(desc("route", "r"), 2)}, want: map[string]any{
			"domain":              "m",
			"descriptors":         []any{entries("user=u"), map[string]any{"entries": []any{"route=r"}, "hitsAddend": 2.0}},
			"metadata":            userMeta,
			"quotaModeViolations": []any{1.0},
			"quotaModeEnabled":    true,
		}},
		{name: "a descriptor over its limit did not pass", descs: []*rlv3.RateLimitDescriptor{desc("plain", "p"), desc("user", "u")}, want: map[string]any{
			"domain":           "m",
			"descriptors":      []any{entries("plain=p"), entries("user=u")},
			"metadata":         userMeta,
			"quotaModeEnabled": false,
		}},
		{name: "override, request hits, unlimited: no rule metadata", hits: 3, descs: []*rlv3.RateLimitDescriptor{override, desc("free", "f")}, want: map[string]any{
			"domain": "m",
			"descriptors": []any{
				map[string]any{"entries": []any{"user=o"}, "limit": "requests_per_unit:10 unit:MINUTE unit_multiplier:{value:2}"},
				entries("free=f"),
			},
			"hitsAddend":       3.0,
			"quotaModeEnabled": false,
		}},
		{name: "a replaced limit's metadata is left out", descs: []*rlv3.RateLimitDescriptor{desc("old", "1"), desc("new", "1")}, want: map[string]any{
			"domain":           "m",
			"descriptors":      []any{entries("old=1"), entries("new=1")},
			"quotaModeEnabled": false,
		}},
		{name: "global quota mode", quota: true, descs: []*rlv3.RateLimitDescriptor{desc("user", "u")}, want: map[string]any{
			"domain":           "m",
			"descriptors":      []any{entries("user=u")},
			"metadata":         userMeta,
			"quotaModeEnabled": true,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, window.NewMemory(), metadataRules, func(o *Options) { o.DynamicMetadata, o.QuotaMode = !tt.off, tt.quota })
			f.call(t, "m", desc("route", "r")) // route's 1 a minute is used up
			f.call(t, "m", desc("plain", "p")) // and plain's
			// Twice: a merge must not change the rules' own metadata.
			for range 2 {
				resp, err := f.srv.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "m", Descriptors: tt.descs, HitsAddend: tt.hits})
				if err != nil {
					t.Fatal(err)
				}
				if tt.want == nil {
					if resp.DynamicMetadata != nil {
						t.Errorf("dynamic_metadata = %v, want none", resp.DynamicMetadata)
					}
					return
				}
				if want := mustStruct(t, tt.want); !proto.Equal(resp.DynamicMetadata, want) {
					got, _ := protojson.Marshal(resp.DynamicMetadata)
					w, _ := protojson.Marshal(want)
					t.Errorf("dynamic_metadata =\n%s\nwant\n%s", got, w)
				}
				checkCodecDynamicMetadata(t, resp)
			}
			if got := f.srv.Rules().Domain("m").Match(desc("user", "u").Entries)[0].Metadata; !proto.Equal(got, mustStruct(t, userMeta)) {
				t.Errorf("the user rule's metadata became %v", got)
			}
		})
	}
}

// checkCodecDynamicMetadata: Codec hands a response with dynamic_metadata
// to proto, whose bytes differ from one Marshal to the next only in the
// order of a Struct's map entries (proto.Marshal is not deterministic for
// maps): what it writes decodes to the response, and a one-field Struct's
// bytes equal proto.Marshal's.
func checkCodecDynamicMetadata(t *testing.T, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	if vtEncodable(resp) {
		t.Fatal("the generated encoder would take a response with dynamic_metadata")
	}
	data, err := NewCodec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	var back rlsv3.RateLimitResponse
	if err := proto.Unmarshal(data.Materialize(), &back); err != nil || !proto.Equal(&back, resp) {
		t.Errorf("Codec.Marshal decodes to %v (%v), want %v", &back, err, resp)
	}
	one := proto.Clone(resp).(*rlsv3.RateLimitResponse)
	one.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{"domain": resp.DynamicMetadata.Fields["domain"]}}
	want, err := proto.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	got, err := NewCodec().Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Free()
	if !bytes.Equal(got.Materialize(), want) {
		t.Errorf("Codec.Marshal:\n%x\nproto.Marshal:\n%x", got.Materialize(), want)
	}
}
