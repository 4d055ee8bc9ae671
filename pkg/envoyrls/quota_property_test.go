package envoyrls

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// quotaPropertyRules: two quota budgets and a plain limit, all charging.
const quotaPropertyRules = `
domain: p
descriptors:
  - key: qa
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: qb
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 6}
`

// TestQuotaProperty checks the quota rule against a model over random
// requests (any mix of the three descriptors; a check of one hit, a check
// of none, or a charge): the request is OVER_LIMIT iff its plain limit is
// over or every quota descriptor of it is; a charge is counted in full on
// every descriptor whatever the answer; a check counts one hit on every
// descriptor when allowed and nothing when denied.
func TestQuotaProperty(t *testing.T) {
	t.Parallel()
	keys := []string{"qa", "qb", "plain"}
	limits := map[string]uint64{"qa": 5, "qb": 8, "plain": 6}
	for kind, newStore := range budgetStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(len(kind))))
			store, inner := newStore(t)
			f := newFixture(t, store, quotaPropertyRules)
			count := map[string]uint64{}
			for step := range 300 {
				if step%60 == 0 { // a new window now and then, so budgets refill
					f.advance(time.Hour)
					clear(count)
				}
				var set []string
				for len(set) == 0 {
					for _, k := range keys {
						if rng.IntN(2) == 0 {
							set = append(set, k)
						}
					}
				}
				var hits *uint64 // nil: a check of one hit
				switch rng.IntN(3) {
				case 1:
					hits = new(uint64) // a check of none
				case 2:
					hits = new(uint64)
					*hits = 1 + rng.Uint64N(6) // a charge
				}
				// A check of none is over only past the limit, as
				// envoyproxy/ratelimit decides it (these are fixed windows).
				need := uint64(1)
				if hits != nil {
					need = *hits
				}
				plainOver, quotas, spent := false, 0, 0
				req := &rlsv3.RateLimitRequest{Domain: "p"}
				for _, k := range set {
					over := count[k]+need > limits[k]
					if k == "plain" {
						plainOver = over
					} else {
						quotas++
						if over {
							spent++
						}
					}
					d := &rlv3.RateLimitDescriptor{Entries: entries(k, "x")}
					if hits != nil {
						d.HitsAddend = wrapperspb.UInt64(*hits)
					}
					req.Descriptors = append(req.Descriptors, d)
				}
				wantOver := plainOver || quotas > 0 && spent == quotas
				resp, err := f.srv.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if got := resp.OverallCode == overCode; got != wantOver {
					t.Fatalf("step %d %v hits %v, counters %v: %v, want over %v", step, set, hits, count, codes1(resp), wantOver)
				}
				for i, k := range set {
					switch {
					case hits != nil && *hits > 0:
						count[k] += *hits
					case hits == nil && !wantOver:
						count[k]++
					}
					if got := counter(t, f, inner, "p", req.Descriptors[i], uint32(limits[k])); got != count[k] {
						t.Fatalf("step %d %v hits %v: %s counted %d, want %d", step, set, hits, k, got, count[k])
					}
				}
			}
		})
	}
}
