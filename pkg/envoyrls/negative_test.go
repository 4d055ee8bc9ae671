package envoyrls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// negativeRules: a plain limit of 5 an hour, a second one, and a quota.
const negativeRules = `
domain: n
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: j
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
`

// negStep is one request of TestNegativeHits: descriptors key=v, each with
// hits as its hits_addend (nil: none), and is_negative_hits where the key
// is written "-key".
type negStep struct {
	name      string
	keys      []string
	hits      *uint64
	code      rlsv3.RateLimitResponse_Code
	remaining []uint32 // per descriptor
	counts    []uint64 // per descriptor, the counter after the request
}

// TestNegativeHits: a descriptor with is_negative_hits (Envoy 1.38's
// hits_addend.is_negative_hits) gives its hits back, as
// envoyproxy/ratelimit's #1140 does: the counter is floored at 0, the
// descriptor is always OK, even over its limit, and a counter known full
// is read again, so the room it frees is used at once. Hits given back
// return what earlier requests took, so they apply whatever the answer to
// the request that carries them.
func TestNegativeHits(t *testing.T) {
	t.Parallel()
	const ok, over = okCode, overCode
	k, j, q := []string{"k"}, []string{"j"}, []string{"q"}
	backK, backQ := []string{"-k"}, []string{"-q"}
	tests := []struct {
		name  string
		steps []negStep
	}{
		{"floored at 0", []negStep{
			{"3 hits", k, hits(3), ok, []uint32{2}, []uint64{3}},
			{"2 back", backK, hits(2), ok, []uint32{4}, []uint64{1}},
			{"5 back, 1 counted", backK, hits(5), ok, []uint32{5}, []uint64{0}},
			{"5 fit again", k, hits(5), ok, []uint32{0}, []uint64{5}},
		}},
		{"a fresh counter", []negStep{
			{"3 back", backK, hits(3), ok, []uint32{5}, []uint64{0}},
			{"5 fit", k, hits(5), ok, []uint32{0}, []uint64{5}},
			{"1 more does not", k, nil, over, []uint32{0}, []uint64{5}},
		}},
		{"over the limit, then given back", []negStep{
			{"5 hits", k, hits(5), ok, []uint32{0}, []uint64{5}},
			{"over", k, nil, over, []uint32{0}, []uint64{5}},
			{"over again, known full", k, nil, over, []uint32{0}, []uint64{5}},
			{"2 back: OK", backK, hits(2), ok, []uint32{2}, []uint64{3}},
			{"the freed room is used at once", k, nil, ok, []uint32{1}, []uint64{4}},
		}},
		{"a charge past the limit, given back", []negStep{
			{"a charge of 8", k, hits(8), over, []uint32{0}, []uint64{8}},
			{"1 back: still over, but OK", backK, hits(1), ok, []uint32{0}, []uint64{7}},
			{"a check is over", k, hits(0), over, []uint32{0}, []uint64{7}},
		}},
		{"a spent quota given back", []negStep{
			{"a charge of 7", q, hits(7), over, []uint32{0}, []uint64{7}},
			{"a check is over", q, nil, over, []uint32{0}, []uint64{7}},
			{"3 back", backQ, hits(3), ok, []uint32{1}, []uint64{4}},
			{"a check fits", q, nil, ok, []uint32{0}, []uint64{5}},
		}},
		{"given back beside a denial", []negStep{
			{"3 hits", k, hits(3), ok, []uint32{2}, []uint64{3}},
			{"j spent", j, nil, ok, []uint32{0}, []uint64{1}},
			// The request's hits_addend of 0 is one hit: one back for k, one more for j.
			{"k given back, j over: denied, k given back all the same", []string{"-k", "j"}, nil, over, []uint32{3, 0}, []uint64{2, 1}},
		}},
	}
	for kind, newStore := range budgetStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					store, inner := newStore(t)
					f := newFixture(t, store, negativeRules)
					for i, st := range tt.steps {
						f.now.Store(t0.Add(time.Duration(i) * time.Second).UnixMilli())
						req := &rlsv3.RateLimitRequest{Domain: "n"}
						for _, key := range st.keys {
							back := strings.HasPrefix(key, "-")
							d := &rlv3.RateLimitDescriptor{Entries: entries(strings.TrimPrefix(key, "-"), "v"), IsNegativeHits: back}
							if st.hits != nil {
								d.HitsAddend = wrapperspb.UInt64(*st.hits)
							}
							req.Descriptors = append(req.Descriptors, d)
						}
						resp, err := f.srv.ShouldRateLimit(context.Background(), req)
						if err != nil {
							t.Fatalf("%s: %v", st.name, err)
						}
						if resp.OverallCode != st.code {
							t.Errorf("%s: %v, want %v", st.name, codes1(resp), st.code)
						}
						for i, d := range req.Descriptors {
							if got := resp.Statuses[i].LimitRemaining; got != st.remaining[i] {
								t.Errorf("%s: descriptor %d remaining %d, want %d", st.name, i, got, st.remaining[i])
							}
							limit := uint32(5)
							if d.Entries[0].Key == "j" {
								limit = 1
							}
							if got := counter(t, f, inner, "n", d, limit); got != st.counts[i] {
								t.Errorf("%s: descriptor %d counter %d, want %d", st.name, i, got, st.counts[i])
							}
						}
					}
				})
			}
		})
	}
}
