package envoyrls

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// aiGatewayRules are shaped as Envoy AI Gateway's QuotaPolicy translator
// generates them: one domain, a backend, a model with a per-model budget,
// and a per-user bucket under it; every budget sets quota_mode and nothing
// else.
const aiGatewayRules = `
domain: ai-gateway-quota
descriptors:
  - key: backend_name
    value: default/openai
    descriptors:
      - key: model_name_override
        value: gpt-4
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 3000}
        descriptors:
          - key: rule-0-x-user-id-match-0
            quota_mode: true
            rate_limit: {unit: hour, requests_per_unit: 1000}
`

// envoyGatewayRules are shaped as Envoy Gateway generates them for a
// BackendTrafficPolicy with a per-user token budget (a distinct header
// match): no quota_mode, no setting of this project.
const envoyGatewayRules = `
domain: default/eg/http
descriptors:
  - key: httproute/default/llm/rule/0/match/0/*
    value: httproute/default/llm/rule/0/match/0/*
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: hour, requests_per_unit: 1000}
`

// budgetStores are the stores of the budget tables, each as the command
// composes it (behind an over-limit cache), and the store beneath, to read
// counters from.
var budgetStores = map[string]func(t *testing.T) (window.Store, window.Store){
	"memory": func(t *testing.T) (window.Store, window.Store) {
		m := window.NewMemory()
		return window.NewOverLimitCache(m), m
	},
	"redis": func(t *testing.T) (window.Store, window.Store) {
		s, err := redisstore.NewBatched(redistest.Start(t).Client(t), redisstore.Options{}, redisstore.BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return window.NewOverLimitCache(s), s
	},
	"cluster": func(t *testing.T) (window.Store, window.Store) {
		s := redisstore.New(redistest.StartCluster(t, 3).Client(t), redisstore.Options{})
		return window.NewOverLimitCache(s), s
	},
}

// budgetStep is one call of a budget table: its descriptors (each a list of
// key, value pairs) with a hits_addend each (nil: none, one hit), and what
// the answer and the counters must be afterwards.
type budgetStep struct {
	name      string
	at        time.Duration // after t0
	descs     [][]string
	hits      *uint64
	code      rlsv3.RateLimitResponse_Code
	remaining []uint32 // per descriptor
	counts    []uint64 // per descriptor, the counter after the call
}

func hits(n uint64) *uint64 { return &n }

// runBudget runs steps against every budget store; limits are the limits
// of the steps' descriptors, in order, to read their counters.
func runBudget(t *testing.T, rulesSrc, domain string, limits []uint32, steps []budgetStep) {
	for kind, newStore := range budgetStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			store, inner := newStore(t)
			f := newFixture(t, store, rulesSrc)
			for _, st := range steps {
				f.now.Store(t0.Add(st.at).UnixMilli())
				req := &rlsv3.RateLimitRequest{Domain: domain}
				for _, kv := range st.descs {
					d := desc(kv...)
					if st.hits != nil {
						d.HitsAddend = wrapperspb.UInt64(*st.hits)
					}
					req.Descriptors = append(req.Descriptors, d)
				}
				resp, err := f.srv.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("%s: ShouldRateLimit: %v", st.name, err)
				}
				if resp.OverallCode != st.code {
					t.Errorf("%s: overall code %v, want %v", st.name, resp.OverallCode, st.code)
				}
				for i, d := range req.Descriptors {
					if got := resp.Statuses[i].LimitRemaining; got != st.remaining[i] {
						t.Errorf("%s: descriptor %d remaining %d, want %d", st.name, i, got, st.remaining[i])
					}
					if got := counter(t, f, inner, domain, d, limits[i]); got != st.counts[i] {
						t.Errorf("%s: descriptor %d counter %d, want %d", st.name, i, got, st.counts[i])
					}
				}
			}
		})
	}
}

// counter reads the counter of d, whose limit is an hour long, from the
// store beneath the over-limit cache, without counting.
func counter(t *testing.T, f *fixture, s window.Store, domain string, d *rlv3.RateLimitDescriptor, limit uint32) uint64 {
	t.Helper()
	l := f.srv.Rules().Domain(domain).Match(d.Entries)
	key := f.srv.keyOf(domain, d, l[0])
	res := make([]window.Result, 1)
	now := time.UnixMilli(f.now.Load())
	if _, err := s.Take(context.Background(), now, []window.Counter{{Key: key, Limit: uint64(limit), Size: time.Hour}}, res); err != nil {
		t.Fatalf("reading counter %q: %v", key, err)
	}
	return res[0].Count
}

// TestAIGatewayBudget: AI Gateway checks with no hits_addend (one hit) and
// charges the tokens a response used, on every budget of the call, when the
// stream is done. Its budgets set quota_mode: as envoyproxy/ratelimit's
// service decides since its #1059, a request is OVER_LIMIT only when every
// quota descriptor of it is over. Here the model's budget keeps room, so
// a spent user budget alone never denies (its status says OVER_LIMIT,
// remaining 0): every call is counted and no charge is lost.
func TestAIGatewayBudget(t *testing.T) {
	t.Parallel()
	const ok = okCode
	model := []string{"backend_name", "default/openai", "model_name_override", "gpt-4"}
	user := append(append([]string(nil), model...), "rule-0-x-user-id-match-0", "alice")
	both := [][]string{model, user}
	runBudget(t, aiGatewayRules, "ai-gateway-quota", []uint32{3000, 1000}, []budgetStep{
		{"check", 0, both, nil, ok, []uint32{2999, 999}, []uint64{1, 1}},
		{"charge 600", time.Second, both, hits(600), ok, []uint32{2399, 399}, []uint64{601, 601}},
		{"check", 2 * time.Second, both, nil, ok, []uint32{2398, 398}, []uint64{602, 602}},
		{"charge 600 past the user's budget", 3 * time.Second, both, hits(600), ok, []uint32{1798, 0}, []uint64{1202, 1202}},
		{"check of a spent budget", 4 * time.Second, both, nil, ok, []uint32{1797, 0}, []uint64{1203, 1203}},
		{"again", 5 * time.Second, both, nil, ok, []uint32{1796, 0}, []uint64{1204, 1204}},
		{"late charge of a stream admitted before", 6 * time.Second, both, hits(50), ok, []uint32{1746, 0}, []uint64{1254, 1254}},
		{"a charge of one token", 7 * time.Second, both, hits(1), ok, []uint32{1745, 0}, []uint64{1255, 1255}},
		{"next window", time.Hour, both, nil, ok, []uint32{2999, 999}, []uint64{1, 1}},
	})
}

// quotaPolicyRules are the rules AI Gateway's controller builds for a
// QuotaPolicy with a default bucket and no bucket rules (its
// internal/ratelimit/translator, the simple case): one descriptor per
// targeted backend ("namespace/name"), the model under it with quota_mode.
const quotaPolicyRules = `
domain: ai-gateway-quota
descriptors:
  - key: backend_name
    value: default/small
    descriptors:
      - key: model_name_override
        value: m
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: backend_name
    value: default/other
    descriptors:
      - key: model_name_override
        value: m
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: backend_name
    value: default/large
    descriptors:
      - key: model_name_override
        value: m
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1000}
`

// TestQuotaPolicyBudget: a QuotaPolicy's token budget holds. AI Gateway
// checks each targeted backend at request time with no hits_addend (one hit
// each) and charges the backend that served with the tokens used when the
// stream is done. As envoyproxy/ratelimit decides since its #1059, the
// request is OVER_LIMIT once every quota descriptor of it is over. A
// denied check counts nothing; a charge counts whatever the answer (Envoy
// ignores the answer at stream end).
func TestQuotaPolicyBudget(t *testing.T) {
	t.Parallel()
	const over, ok = overCode, okCode
	backend := func(name string) []string {
		return []string{"backend_name", "default/" + name, "model_name_override", "m"}
	}
	small, other, large := [][]string{backend("small")}, [][]string{backend("other")}, [][]string{backend("large")}
	both := [][]string{backend("small"), backend("other")}
	for _, tt := range []struct {
		name   string
		limits []uint32
		steps  []budgetStep
	}{
		{"7-token charges against 10", []uint32{10}, []budgetStep{
			{"check", 0, small, nil, ok, []uint32{9}, []uint64{1}},
			{"charge 7", time.Second, small, hits(7), ok, []uint32{2}, []uint64{8}},
			{"check", 2 * time.Second, small, nil, ok, []uint32{1}, []uint64{9}},
			{"charge 7 past the budget", 3 * time.Second, small, hits(7), over, []uint32{0}, []uint64{16}},
			{"check of a spent budget: denied, uncounted", 4 * time.Second, small, nil, over, []uint32{0}, []uint64{16}},
			{"again", 5 * time.Second, small, nil, over, []uint32{0}, []uint64{16}},
			{"next window", time.Hour, small, nil, ok, []uint32{9}, []uint64{1}},
		}},
		{"600-token charges against 1000", []uint32{1000}, []budgetStep{
			{"check", 0, large, nil, ok, []uint32{999}, []uint64{1}},
			{"charge 600", time.Second, large, hits(600), ok, []uint32{399}, []uint64{601}},
			{"check", 2 * time.Second, large, nil, ok, []uint32{398}, []uint64{602}},
			{"charge 600 past the budget", 3 * time.Second, large, hits(600), over, []uint32{0}, []uint64{1202}},
			{"check of a spent budget", 4 * time.Second, large, nil, over, []uint32{0}, []uint64{1202}},
		}},
		{"two targeted backends", []uint32{10, 10}, []budgetStep{
			{"check both", 0, both, nil, ok, []uint32{9, 9}, []uint64{1, 1}},
			{"charge small 9", time.Second, small, hits(9), ok, []uint32{0}, []uint64{10}},
			{"check both: small spent, other has room", 2 * time.Second, both, nil, ok, []uint32{0, 8}, []uint64{11, 2}},
			{"charge other 9 past its budget", 3 * time.Second, other, hits(9), over, []uint32{0}, []uint64{11}},
			{"check both: both spent", 4 * time.Second, both, nil, over, []uint32{0, 0}, []uint64{11, 11}},
			{"again", 5 * time.Second, both, nil, over, []uint32{0, 0}, []uint64{11, 11}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runBudget(t, quotaPolicyRules, "ai-gateway-quota", tt.limits, tt.steps)
		})
	}
}

// TestEnvoyGatewayBudget: Envoy Gateway's response cost checks with a
// descriptor hits_addend of 0 at request time, which counts nothing, and
// charges the cost when the stream is done, under rules with no setting of
// this project. Before charges were counted, the second charge here was
// refused as over the limit and the budget never ran out.
func TestEnvoyGatewayBudget(t *testing.T) {
	t.Parallel()
	const over, ok = overCode, okCode
	user := [][]string{{"httproute/default/llm/rule/0/match/0/*", "httproute/default/llm/rule/0/match/0/*", "rule-0-match-0", "alice"}}
	runBudget(t, envoyGatewayRules, "default/eg/http", []uint32{1000}, []budgetStep{
		{"check", 0, user, hits(0), ok, []uint32{1000}, []uint64{0}},
		{"charge 600", time.Second, user, hits(600), ok, []uint32{400}, []uint64{600}},
		{"check", 2 * time.Second, user, hits(0), ok, []uint32{400}, []uint64{600}},
		{"charge 600 past the budget", 3 * time.Second, user, hits(600), over, []uint32{0}, []uint64{1200}},
		{"check of a spent budget", 4 * time.Second, user, hits(0), over, []uint32{0}, []uint64{1200}},
		{"late charge", 5 * time.Second, user, hits(100), over, []uint32{0}, []uint64{1300}},
		{"check", 6 * time.Second, user, hits(0), over, []uint32{0}, []uint64{1300}},
		{"a request of no stated cost is refused uncounted", 7 * time.Second, user, nil, over, []uint32{0}, []uint64{1300}},
		{"next window", time.Hour, user, hits(0), ok, []uint32{1000}, []uint64{0}},
		{"a request of no stated cost counts one", time.Hour + time.Second, user, nil, ok, []uint32{999}, []uint64{1}},
	})
}

// TestRefuseKeepsAdmission: under over_limit: refuse a stated cost that does
// not fit is denied and counts nothing, as are the other counters of its
// request; a charge beside it still counts.
func TestRefuseKeepsAdmission(t *testing.T) {
	t.Parallel()
	const over, ok = overCode, okCode
	const src = `
domain: d
descriptors:
  - key: bulk
    over_limit: refuse
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000}
`
	bulk, tokens := []string{"bulk", "b"}, []string{"tokens", "t"}
	runBudget(t, src, "d", []uint32{100, 1000}, []budgetStep{
		{"60 of 100", 0, [][]string{bulk, tokens}, hits(60), ok, []uint32{40, 940}, []uint64{60, 60}},
		{"60 more does not fit", time.Second, [][]string{bulk, tokens}, hits(60), over, []uint32{40, 880}, []uint64{60, 120}},
		{"40 fits", 2 * time.Second, [][]string{bulk}, hits(40), ok, []uint32{0}, []uint64{100}},
	})
}

// TestFailureModeKeepsCharges: when a failed counter's failure mode refuses
// a request whose other counters were counted, admission hits are given
// back but a charge stays: it was spent.
func TestFailureModeKeepsCharges(t *testing.T) {
	t.Parallel()
	const src = `
domain: p
descriptors:
  - key: budget
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: rate
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: down_deny
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	mem := window.NewMemory()
	f := newFixture(t, partialStore{mem, "down_"}, src)
	charge := desc("budget", "b")
	charge.HitsAddend = wrapperspb.UInt64(300)
	resp := f.call(t, "p", charge, desc("rate", "r"), desc("down_deny", "x"))
	if resp.OverallCode != overCode {
		t.Fatalf("failed deny: %v, want OVER_LIMIT", resp)
	}
	check := desc("budget", "b")
	check.HitsAddend = wrapperspb.UInt64(0)
	g := newFixture(t, mem, src)
	if got := g.call(t, "p", check).Statuses[0].LimitRemaining; got != 700 {
		t.Errorf("budget remaining = %d, want 700 (the charge kept)", got)
	}
	if got := g.call(t, "p", desc("rate", "r")).Statuses[0].LimitRemaining; got != 4 {
		t.Errorf("rate remaining = %d, want 4 (the refused hit given back)", got)
	}
}
