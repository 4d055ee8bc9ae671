package xds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// loadRateLimitConfigs reads the RateLimitConfigs of a YAML file, one per
// document, in their protojson form, strictly. It also reads Envoy Gateway's
// own rendering of them (its translator testdata, written through
// envoyproxy/ratelimit's YAML types), which adds value_to_metric and
// share_threshold to every descriptor: fields the proto does not have, so
// they must be false, as the translator can only make them.
func loadRateLimitConfigs(path string) ([]*rlsconfv3.RateLimitConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*rlsconfv3.RateLimitConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if doc == nil {
			continue
		}
		if err := dropRenderingFields(doc); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		var c rlsconfv3.RateLimitConfig
		if err := protojson.Unmarshal(js, &c); err != nil {
			return nil, fmt.Errorf("%s: document %d: not a RateLimitConfig: %w", path, i, err)
		}
		out = append(out, &c)
	}
	return out, nil
}

// dropRenderingFields removes value_to_metric and share_threshold from
// every descriptor of v, failing on one that is true.
func dropRenderingFields(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range []string{"value_to_metric", "share_threshold"} {
			if b, ok := x[k]; ok {
				if b != false {
					return fmt.Errorf("%s: %v, which a RateLimitConfig cannot carry", k, b)
				}
				delete(x, k)
			}
		}
		for _, e := range x {
			if err := dropRenderingFields(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := dropRenderingFields(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// pushEnvoyGateway pushes configs to a Client over a real xDS server, as
// Envoy Gateway's runner does, and returns the rules it applied. A push
// that does not compile is NACKed: the test fails with its problems.
func pushEnvoyGateway(t *testing.T, configs []*rlsconfv3.RateLimitConfig) *rules.Set {
	t.Helper()
	srv := xdstest.Start(t, "envoy-ratelimit")
	c, a := startClient(t, srv, Options{})
	v := srv.Push(configs...)
	deadline := time.Now().Add(within)
	for !srv.Acked(v) {
		if st := c.Status(); st.LastNack != nil {
			t.Fatalf("push NACKed: %s", st.LastNack.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("push %s not ACKed in %v; status %+v", v, within, c.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	set, _ := a.get()
	var domains []string
	for _, cfg := range configs {
		domains = append(domains, cfg.GetDomain())
	}
	slices.Sort(domains)
	if got := set.Domains(); !slices.Equal(got, slices.Compact(domains)) {
		t.Fatalf("rules serve domains %v, want %v", got, domains)
	}
	return set
}

// The names of the fixtures (see testdata/envoygateway/README.md).
const (
	egListener = "default/eg/http"
	egRoute    = "httproute/shop/cart/rule/0/match/0/shop_example_com"
	egRoute2   = "httproute/shop/orders/rule/0/match/0/shop_example_com"
	egPolicy   = "shop/per-user"
	egPolicy2  = "shop/per-org"
)

// egDesc is a descriptor as Envoy sends it for an Envoy Gateway route:
// kv are its entries' keys and values, in order.
type egDesc struct {
	kv    []string
	hits  *uint64 // the descriptor's hits_addend (a rule's cost), if any
	limit *rlv3.RateLimitDescriptor_RateLimitOverride
}

// onRoute is a descriptor of route's own rule: the route's entry, then kv.
func onRoute(route string, kv ...string) egDesc {
	return egDesc{kv: append([]string{route, route}, kv...)}
}

// onShared is a descriptor of a shared rule: the rule's entry, then kv.
func onShared(policy string, rule int, kv ...string) egDesc {
	key := fmt.Sprintf("%s/rule/%d", policy, rule)
	return egDesc{kv: append([]string{key, key}, kv...)}
}

func (d egDesc) withHits(n uint64) egDesc { d.hits = &n; return d }

func (d egDesc) proto() *rlv3.RateLimitDescriptor {
	p := &rlv3.RateLimitDescriptor{Limit: d.limit}
	for i := 0; i+1 < len(d.kv); i += 2 {
		p.Entries = append(p.Entries, &rlv3.RateLimitDescriptor_Entry{Key: d.kv[i], Value: d.kv[i+1]})
	}
	if d.hits != nil {
		p.HitsAddend = wrapperspb.UInt64(*d.hits)
	}
	return p
}

// egCall is one request, made times times (default once), each answered
// want, and once more if thenOver.
type egCall struct {
	domain string
	descs  []egDesc
	want   rlsv3.RateLimitResponse_Code
	times  int
	// check, if set, looks further at the last answer of the times.
	check func(*rlsv3.RateLimitResponse) string
	// thenOver makes the request once more, answered OVER_LIMIT.
	thenOver bool
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func call(domain string, want rlsv3.RateLimitResponse_Code, times int, descs ...egDesc) egCall {
	return egCall{domain: domain, descs: descs, want: want, times: times}
}

// fill is a request allowed n times, and then OVER_LIMIT: a limit of n.
func fill(domain string, n int, descs ...egDesc) egCall {
	return egCall{domain: domain, descs: descs, want: ok, times: n, thenOver: true}
}

// egCalls are the requests each fixture answers, all in one second (the
// clock does not move), on a fresh store.
var egCalls = map[string][]egCall{
	"distinct-match.yaml": {
		fill(egListener, 3, onRoute(egRoute, "rule-0-match-0", "alice")),
		call(egListener, ok, 1, onRoute(egRoute, "rule-0-match-0", "bob")),
	},
	"distinct-remote-address-match.yaml": {
		fill(egListener, 2, onRoute(egRoute, "masked_remote_address", "10.0.0.0/8", "remote_address", "10.1.2.3")),
		call(egListener, ok, 1, onRoute(egRoute, "masked_remote_address", "10.0.0.0/8", "remote_address", "10.9.9.9")),
	},
	"empty-header-matches.yaml": {
		fill(egListener, 2, onRoute(egRoute, "rule-0-match--1", "rule-0-match--1")),
	},
	"global-shadow-mode.yaml": {
		// Over its limit of 1 from the second on, but in shadow mode.
		{domain: egListener, want: ok, times: 3, descs: []egDesc{onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1",
			"rule-0-match-2", "rule-0-match-2", "masked_remote_address", "0.0.0.0/0")},
			check: statusCode(ok)}, // as the reference: a shadow-mode status is OK
	},
	"global-shared-distinct-match.yaml": {
		fill(egPolicy, 2, onShared(egPolicy, 0, "rule-0-match-0", "alice")),
		call(egPolicy, ok, 1, onShared(egPolicy, 0, "rule-0-match-0", "bob")),
	},
	"global-shared-multiple-shared-policies.yaml": {
		call(egListener, ok, 10, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
		fill(egPolicy, 1, onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0")),
		fill(egPolicy2, 3, onShared(egPolicy2, 0, "rule-0-match-0", "rule-0-match-0")),
		call(egListener, over, 1, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
	},
	"header-and-cidr-matches.yaml": {
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1", "rule-0-match-2", "rule-0-match-2", "masked_remote_address", "0.0.0.0/0")),
		// Envoy sends no descriptor for a rule one of whose matches fails;
		// a partial one matches no limit.
		call(egListener, ok, 1, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1")),
	},
	"masked-remote-address-match.yaml": {
		fill(egListener, 2, onRoute(egRoute, "masked_remote_address", "172.16.0.0/12")),
	},
	"method-match.yaml": {
		fill(egListener, 1, onRoute(egRoute, "rule-0-method", "rule-0-method")),
		call(egListener, ok, 1, onRoute(egRoute, "rule-1-method", "rule-1-method")),
		// Both rules: the first is spent, so nothing counts on the second.
		call(egListener, over, 1, onRoute(egRoute, "rule-0-method", "rule-0-method"), onRoute(egRoute, "rule-1-method", "rule-1-method")),
		fill(egListener, 3, onRoute(egRoute, "rule-1-method", "rule-1-method")),
	},
	"month-year-rule.yaml": {
		{domain: egListener, want: ok, times: 3, descs: []egDesc{onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")}, check: unit(rlsv3.RateLimitResponse_RateLimit_MONTH)},
		call(egListener, over, 1, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
		{domain: egListener, want: ok, times: 1, descs: []egDesc{onRoute(egRoute2, "rule-0-match-0", "rule-0-match-0")}, check: unit(rlsv3.RateLimitResponse_RateLimit_YEAR)},
		call(egListener, over, 1, onRoute(egRoute2, "rule-0-match-0", "rule-0-match-0")),
	},
	"multiple-all-match.yaml": {
		call(egListener, ok, 1, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1", "rule-0-match-2", "rule-0-match-2",
			"rule-0-method", "rule-0-method", "rule-0-path", "rule-0-path", "masked_remote_address", "0.0.0.0/0")),
		call(egListener, over, 1, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1", "rule-0-match-2", "rule-0-match-2",
			"rule-0-method", "rule-0-method", "rule-0-path", "rule-0-path", "masked_remote_address", "0.0.0.0/0")),
	},
	"multiple-domains.yaml": {
		fill(egListener, 2, onRoute(egRoute2, "rule-0-match-0", "rule-0-match-0")),
		fill(egPolicy, 2, onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0")),
	},
	"multiple-global-shared-distinct-match.yaml": {
		fill(egPolicy, 2, onShared(egPolicy, 1, "rule-1-match-0", "alice")),
		call(egPolicy, ok, 2, onShared(egPolicy, 0, "rule-0-match-0", "alice")),
		fill(egPolicy, 2, onShared(egPolicy, 2, "rule-2-match-0", "alice")),
	},
	"multiple-listeners-distinct-match.yaml": {
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "alice")),
		fill("default/eg/https", 2, onRoute(egRoute, "rule-0-match-0", "alice")),
	},
	"multiple-listeners-same-shared-distinct-match.yaml": {
		// Envoy's filters on both listeners send the same domain and entries.
		fill(egPolicy, 2, onShared(egPolicy, 0, "rule-0-match-0", "alice")),
	},
	"multiple-listeners-shared-distinct-match.yaml": {
		call(egListener, ok, 2, onRoute(egRoute, "rule-0-match-0", "alice")),
		fill(egPolicy2, 2, onShared(egPolicy2, 0, "rule-0-match-0", "alice")),
		call(egListener, over, 1, onRoute(egRoute, "rule-0-match-0", "alice")),
	},
	"multiple-masked-remote-address-match-with-same-cidr.yaml": {
		fill(egListener, 2, onRoute(egRoute, "masked_remote_address", "192.0.2.10/32")),
		{domain: egListener, want: ok, times: 1, descs: []egDesc{onRoute(egRoute2, "masked_remote_address", "192.0.2.10/32")}, check: remaining(299)},
	},
	"multiple-matches.yaml": {
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1")),
	},
	"multiple-routes.yaml": {
		fill(egListener, 1, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
		fill(egListener, 2, onRoute(egRoute2, "rule-0-match-0", "rule-0-match-0")),
	},
	"multiple-rules.yaml": {
		{domain: egListener, want: ok, times: 1, descs: []egDesc{onRoute(egRoute, "rule-1-match-0", "rule-1-match-0").withHits(1000)}, check: remaining(4294967295 - 1000)},
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0"), onRoute(egRoute, "rule-1-match-0", "rule-1-match-0")),
	},
	"multiple-shared-and-unshared.yaml": {
		fill(egPolicy, 2, onShared(egPolicy, 2, "rule-1-match-0", "rule-1-match-0")),
		fill(egPolicy, 1, onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0")),
		call(egListener, ok, 3, onRoute(egRoute, "rule-1-match-0", "rule-1-match-0")),
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
	},
	"multiple-shared-ratelimit-rules.yaml": {
		fill(egPolicy, 2, onShared(egPolicy, 1, "rule-1-match-0", "rule-1-match-0")),
		fill(egListener, 3, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
	},
	"path-match.yaml": {
		fill(egListener, 1, onRoute(egRoute, "rule-0-path", "rule-0-path")),
		call(egListener, ok, 2, onRoute(egRoute, "rule-1-path", "rule-1-path")),
	},
	"query-parameters-match.yaml": {
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0", "rule-0-match-1", "rule-0-match-1")),
	},
	"ratelimit-sourceip-invert.yaml": {
		fill(egListener, 2, onRoute(egRoute, "masked_remote_address", "invert:10.0.0.0/8")),
		call(egListener, ok, 1, onRoute(egRoute, "masked_remote_address", "10.0.0.0/8")),
	},
	"value-match.yaml": {
		fill(egListener, 2, onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")),
	},
	"shared-with-cost.yaml": {
		// requestCost 3 against 5 per second: counted; a check (cost 0)
		// counts nothing; a cost of 3 more is over, and counted anyway,
		// as the reference counts every hit (over_limit: charge, the
		// default for rules over xDS); from then on even a check is over.
		{domain: egPolicy, want: ok, times: 1, descs: []egDesc{onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0").withHits(3)}, check: remaining(2)},
		{domain: egPolicy, want: ok, times: 1, descs: []egDesc{onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0").withHits(0)}, check: remaining(2)},
		call(egPolicy, over, 1, onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0").withHits(3)),
		call(egPolicy, over, 1, onShared(egPolicy, 0, "rule-0-match-0", "rule-0-match-0").withHits(0)),
	},
	"week.yaml": {
		{domain: egListener, want: ok, times: 2, descs: []egDesc{onRoute(egRoute, "rule-0-match-0", "alice")}, check: unit(rlsv3.RateLimitResponse_RateLimit_WEEK)},
		{domain: egListener, want: over, times: 1, descs: []egDesc{onRoute(egRoute, "rule-0-match-0", "alice")}, check: resetWithin(7 * 24 * time.Hour)},
		call(egListener, ok, 1, onRoute(egRoute, "rule-0-match-0", "bob")),
	},
	"block.yaml": {
		{domain: egListener, want: over, times: 3, descs: []egDesc{onRoute(egRoute, "rule-0-match-0", "rule-0-match-0")}, check: limitOf(0, rlsv3.RateLimitResponse_RateLimit_SECOND)},
	},
	"limit-from-metadata.yaml": {
		{domain: egListener, want: ok, times: 1, descs: []egDesc{overrideLimit(1, typev3.RateLimitUnit_SECOND)}, check: limitOf(1, rlsv3.RateLimitResponse_RateLimit_SECOND)},
		call(egListener, over, 1, overrideLimit(1, typev3.RateLimitUnit_SECOND)),
		// Without the metadata, the configured default, counted apart.
		{domain: egListener, want: ok, times: 5, descs: []egDesc{onRoute("httproute/shop/tenants/rule/0/match/0/shop_example_com", "rule-0-match-0", "rule-0-match-0")},
			check: limitOf(5, rlsv3.RateLimitResponse_RateLimit_SECOND)},
		call(egListener, over, 1, onRoute("httproute/shop/tenants/rule/0/match/0/shop_example_com", "rule-0-match-0", "rule-0-match-0")),
	},
	"max-rules.yaml": {
		// Rule i allows i+1 a minute. All 256: rule 0's one passes, then
		// it is spent; rule 255 still has 255 left.
		{domain: egListener, want: ok, times: 1, descs: allRules(256), check: statuses(256)},
		call(egListener, over, 1, allRules(256)...),
		{domain: egListener, want: ok, times: 1, descs: allRules(256)[255:], check: remaining(254)},
	},
}

// overrideLimit is the tenant route's descriptor with Envoy's limit
// override, as limit.fromMetadata makes Envoy send it.
func overrideLimit(n uint32, u typev3.RateLimitUnit) egDesc {
	d := onRoute("httproute/shop/tenants/rule/0/match/0/shop_example_com", "rule-0-match-0", "rule-0-match-0")
	d.limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
	return d
}

// allRules are the descriptors of max-rules.yaml's first n rules.
func allRules(n int) []egDesc {
	ds := make([]egDesc, n)
	for i := range ds {
		r := fmt.Sprintf("rule-%d-match-0", i)
		ds[i] = onRoute(egRoute, r, r)
	}
	return ds
}

func statusCode(want rlsv3.RateLimitResponse_Code) func(*rlsv3.RateLimitResponse) string {
	return func(r *rlsv3.RateLimitResponse) string {
		if got := r.Statuses[0].Code; got != want {
			return fmt.Sprintf("status %v, want %v", got, want)
		}
		return ""
	}
}

func unit(want rlsv3.RateLimitResponse_RateLimit_Unit) func(*rlsv3.RateLimitResponse) string {
	return func(r *rlsv3.RateLimitResponse) string {
		if got := r.Statuses[0].GetCurrentLimit().GetUnit(); got != want {
			return fmt.Sprintf("current_limit unit %v, want %v", got, want)
		}
		return ""
	}
}

func limitOf(n uint32, u rlsv3.RateLimitResponse_RateLimit_Unit) func(*rlsv3.RateLimitResponse) string {
	return func(r *rlsv3.RateLimitResponse) string {
		if l := r.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != n || l.GetUnit() != u {
			return fmt.Sprintf("current_limit %v, want %d per %v", l, n, u)
		}
		return ""
	}
}

func remaining(n uint32) func(*rlsv3.RateLimitResponse) string {
	return func(r *rlsv3.RateLimitResponse) string {
		if got := r.Statuses[len(r.Statuses)-1].LimitRemaining; got != n {
			return fmt.Sprintf("limit_remaining %d, want %d", got, n)
		}
		return ""
	}
}

func resetWithin(d time.Duration) func(*rlsv3.RateLimitResponse) string {
	return func(r *rlsv3.RateLimitResponse) string {
		if got := r.Statuses[0].GetDurationUntilReset().AsDuration(); got <= 0 || got > d {
			return fmt.Sprintf("duration_until_reset %v, want within %v", got, d)
		}
		return ""
	}
}

func statuses(n int) func(*rlsv3.RateLimitResponse) string {
	return func(r *rlsv3.RateLimitResponse) string {
		if len(r.Statuses) != n {
			return fmt.Sprintf("%d statuses, want %d", len(r.Statuses), n)
		}
		return ""
	}
}

// TestEnvoyGatewayConfigs pushes each fixture of testdata/envoygateway (our
// own configs in the shapes Envoy Gateway v1.9's translator makes; see its
// README) over a real xDS server: each is ACKed, so it compiled with no
// problem, and a server with the command's input limits, on the memory
// store, answers its requests as envoyproxy/ratelimit would.
func TestEnvoyGatewayConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "envoygateway", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := egCalls[filepath.Base(f)]; !ok {
			t.Errorf("%s has no requests in egCalls", f)
		}
	}
	if len(files) != len(egCalls) {
		t.Errorf("%d fixtures, %d sets of requests", len(files), len(egCalls))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			configs, err := loadRateLimitConfigs(f)
			if err != nil {
				t.Fatal(err)
			}
			set := pushEnvoyGateway(t, configs)
			checkLeaves(t, set, configs)
			srv := newEGServer(t, set)
			for i, c := range egCalls[filepath.Base(f)] {
				req := &rlsv3.RateLimitRequest{Domain: c.domain}
				for _, d := range c.descs {
					req.Descriptors = append(req.Descriptors, d.proto())
				}
				times := max(c.times, 1)
				if c.thenOver {
					times++
				}
				for n := range times {
					want := c.want
					if c.thenOver && n == times-1 {
						want = over
					}
					resp, err := srv.ShouldRateLimit(context.Background(), req)
					if err != nil || resp.OverallCode != want {
						t.Fatalf("call %d (%s %v), time %d: %v, %v; want %v", i, c.domain, c.descs[0].kv, n+1, resp.GetOverallCode(), err, want)
					}
					if c.check != nil && n == max(c.times, 1)-1 {
						if msg := c.check(resp); msg != "" {
							t.Errorf("call %d (%s %v): %s", i, c.domain, c.descs[0].kv, msg)
						}
					}
				}
			}
		})
	}
}

// newEGServer serves set with the command's input limits on a fresh memory
// store, its clock stopped at a Monday noon, the start of a second.
func newEGServer(t *testing.T, set *rules.Set) *envoyrls.Server {
	t.Helper()
	now := time.Date(2026, 7, 6, 12, 0, 0, 0, time.UTC)
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: set, Now: func() time.Time { return now },
		Limits: envoyrls.InputLimits{MaxDescriptors: config.DefaultMaxDescriptors, MaxEntries: config.DefaultMaxEntries,
			MaxEntryBytes: config.DefaultMaxEntryBytes, MaxHits: config.DefaultMaxHits}})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// leaf is a descriptor of a RateLimitConfig that has a limit, as the
// entries Envoy would send to reach it (a value for a descriptor without
// one: Envoy's, for a Distinct match).
type leaf struct {
	domain  string
	entries []*rlv3.RateLimitDescriptor_Entry
	limit   *rlsconfv3.RateLimitPolicy
	shadow  bool // the limit's descriptor is in shadow mode
}

func leaves(domain string, ds []*rlsconfv3.RateLimitDescriptor, above []*rlv3.RateLimitDescriptor_Entry, out []leaf) []leaf {
	for _, d := range ds {
		v := d.GetValue()
		if v == "" {
			v = "any-" + d.GetKey()
		}
		es := append(slices.Clip(above), &rlv3.RateLimitDescriptor_Entry{Key: d.GetKey(), Value: v})
		if d.GetRateLimit() != nil {
			out = append(out, leaf{domain: domain, entries: es, limit: d.GetRateLimit(), shadow: d.GetShadowMode()})
		}
		out = leaves(domain, d.GetDescriptors(), es, out)
	}
	return out
}

// checkLeaves asks, on a fresh store, for each descriptor of configs that
// has a limit, with the entries that lead to it: the answer carries that
// limit and its unit, and is OK, or OVER_LIMIT for a limit of 0 (a shadow
// mode one excepted). It checks that every limit of every config loaded
// where it was written.
func checkLeaves(t *testing.T, set *rules.Set, configs []*rlsconfv3.RateLimitConfig) {
	t.Helper()
	srv := newEGServer(t, set)
	var all []leaf
	for _, c := range configs {
		all = leaves(c.GetDomain(), c.GetDescriptors(), nil, all)
	}
	if len(all) == 0 {
		t.Fatal("no descriptor with a limit")
	}
	for _, l := range all {
		resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: l.domain,
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: l.entries}}})
		want := ok
		if l.limit.GetRequestsPerUnit() == 0 && !l.limit.GetUnlimited() && !l.shadow {
			want = over
		}
		if err != nil || resp.OverallCode != want {
			t.Errorf("%s %v: %v, %v; want %v", l.domain, l.entries, resp.GetOverallCode(), err, want)
			continue
		}
		cl := resp.Statuses[0].GetCurrentLimit()
		if cl.GetRequestsPerUnit() != l.limit.GetRequestsPerUnit() || cl.GetUnit().String() != l.limit.GetUnit().String() {
			t.Errorf("%s %v: current_limit %v, want %d per %v", l.domain, l.entries, cl, l.limit.GetRequestsPerUnit(), l.limit.GetUnit())
		}
	}
}
