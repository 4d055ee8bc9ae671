package metrics

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestMapStat: the labels are what envoyproxy/ratelimit's default mapper
// makes of its statsd names: two parts after the domain's give domain and
// key1 (the glob rules), more give domain, key1 and key2 (the regex rules,
// the rest dropped); a value's dots split it like any other dot, except in
// an IPv4 address, which the reference's stat name cleaning joins with '_'
// along with ':' and '|'.
func TestMapStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key    string // the reference's stats key: domain, then its parts
		labels []string
	}{
		{"edge.api_key", []string{"edge", "api_key"}},
		{"edge.api_key_k1", []string{"edge", "api_key_k1"}},
		{"edge.api_key.path", []string{"edge", "api_key", "path"}},
		{"edge.tier_gold.region.zone", []string{"edge", "tier_gold", "region"}},
		{"edge.route_draw.method_GET.subject_id_42", []string{"edge", "route_draw", "method_GET"}},
		{"edge.host_a.example", []string{"edge", "host_a", "example"}},
		{"edge.remote_address_10.0.0.1", []string{"edge", "remote_address_10_0_0_1"}},
		{"edge.ip_10.0.0.1.path_/x", []string{"edge", "ip_10_0_0_1", "path_/x"}},
		{"edge.authority_host:8080", []string{"edge", "authority_host_8080"}},
		{"edge.a_x|y", []string{"edge", "a_x_y"}},
		{"edge.user_bot*", []string{"edge", "user_bot*"}},
		{"edge.empty_", []string{"edge", "empty_"}},
		{"a.b.c", []string{"a", "b", "c"}}, // a domain's dot splits it too
	}
	for _, tt := range tests {
		for s, name := range statNames {
			metric, labels, ok := mapStat(tt.key, s)
			if !ok || metric != s || !slices.Equal(labels, tt.labels) {
				t.Errorf("mapStat(%q, %s) = %s %q %v, want %s %q", tt.key, name, statNames[metric], labels, ok, name, tt.labels)
			}
		}
	}
	// A value that ends in ".over_limit" makes the deeper key's near_limit
	// count on over_limit's metric, as the mapper's unanchored rules do.
	if metric, labels, _ := mapStat("edge.a.b.x.over_limit", statTotalHits); metric != statOverLimit || !slices.Equal(labels, []string{"edge", "a", "b"}) {
		t.Errorf("mapStat(edge.a.b.x.over_limit, total_hits) = %s %q, want over_limit [edge a b]", statNames[metric], labels)
	}
}

// TestAddHits: the reference's limiter counts hits, not requests, and
// splits a request's hits at the near-limit threshold and at the limit.
func TestAddHits(t *testing.T) {
	t.Parallel()
	const limit, near = 10, 8
	tests := []struct {
		name    string
		outcome envoyrls.Outcome
		hits    uint64
		used    uint64
		want    [numStats]uint64 // near, over, total, within, shadow
	}{
		{"allowed below the threshold", envoyrls.OutcomeOK, 3, 2, [numStats]uint64{0, 0, 3, 3, 0}},
		{"allowed across the threshold", envoyrls.OutcomeNearLimit, 3, 7, [numStats]uint64{2, 0, 3, 3, 0}},
		{"allowed past the threshold", envoyrls.OutcomeNearLimit, 2, 8, [numStats]uint64{2, 0, 2, 2, 0}},
		{"allowed up to the limit", envoyrls.OutcomeNearLimit, 10, 0, [numStats]uint64{2, 0, 10, 10, 0}},
		{"check only", envoyrls.OutcomeOK, 0, 9, [numStats]uint64{0, 0, 0, 0, 0}},
		{"denied across the limit", envoyrls.OutcomeOverLimit, 4, 7, [numStats]uint64{2, 1, 4, 0, 0}},
		{"denied across both", envoyrls.OutcomeOverLimit, 12, 0, [numStats]uint64{2, 2, 12, 0, 0}},
		{"denied between them", envoyrls.OutcomeOverLimit, 3, 9, [numStats]uint64{1, 2, 3, 0, 0}},
		{"denied when full", envoyrls.OutcomeOverLimit, 4, 10, [numStats]uint64{0, 4, 4, 0, 0}},
		{"shadow across the limit", envoyrls.OutcomeShadowOverLimit, 4, 9, [numStats]uint64{1, 3, 4, 0, 3}},
		{"shadow when full", envoyrls.OutcomeShadowOverLimit, 2, 12, [numStats]uint64{0, 2, 2, 0, 2}},
		{"store failed", envoyrls.OutcomeFailureMode, 5, 0, [numStats]uint64{0, 0, 5, 0, 0}},
	}
	for _, tt := range tests {
		var c [numStats]prometheus.Counter
		for s := range c {
			c[s] = prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
		}
		add(&c, &envoyrls.Decision{Limit: &rules.Limit{RequestsPerUnit: limit}, Outcome: tt.outcome, Hits: tt.hits, Used: tt.used, NearLimit: near})
		var got [numStats]uint64
		for s := range c {
			got[s] = uint64(testutil.ToFloat64(c[s]))
		}
		if got != tt.want {
			t.Errorf("%s: %d hits on %d used = near, over, total, within, shadow %v, want %v", tt.name, tt.hits, tt.used, got, tt.want)
		}
	}
}

const mapperRules = `
domain: mapper
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    value: "bot*"
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tier
    value: gold
    descriptors:
      - key: region
        descriptors:
          - key: zone
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: named
    rate_limit: {name: per_name, unit: minute, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: host
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: files
    value: "docs/*"
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: listed
`

// hit is a descriptor of a request: entries, then its hits_addend.
type hit struct {
	kv   []string
	hits uint64
}

func (h hit) descriptor() *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(h.hits)}
	for i := 0; i+1 < len(h.kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: h.kv[i], Value: h.kv[i+1]})
	}
	return d
}

// refSeries is one label set of the reference's per-limit metrics and its
// values, derived by hand from the reference's limiter and mapper.
type refSeries struct {
	labels                            string
	total, over, near, within, shadow uint64
}

// refExposition renders series as the text exposition of the reference's
// five per-limit metrics.
func refExposition(series []refSeries) string {
	var b strings.Builder
	for s, name := range statNames {
		fmt.Fprintf(&b, "# HELP ratelimit_service_rate_limit_%s %s\n# TYPE ratelimit_service_rate_limit_%s counter\n", name, statHelp[s], name)
		for _, r := range series {
			v := [numStats]uint64{r.near, r.over, r.total, r.within, r.shadow}[s]
			fmt.Fprintf(&b, "ratelimit_service_rate_limit_%s{%s} %d\n", name, r.labels, v)
		}
	}
	return b.String()
}

func refMetricNames() []string {
	var names []string
	for _, s := range statNames {
		names = append(names, "ratelimit_service_rate_limit_"+s)
	}
	return names
}

// TestReferenceMetrics: for a set of rules and requests, the reference's
// per-limit metrics are what its limiter and Prometheus mapper make of
// them: hits (hits_addend) not requests, split at the near-limit threshold
// (NEAR_LIMIT_RATIO 0.8) and the limit; labels from the stats key (the
// path, never the name; request values where detailed_metric or
// value_to_metric ask; an override as "override"); nothing for unlimited
// and whitelisted descriptors.
func TestReferenceMetrics(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t, Options{})
	rs, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(mapperRules)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_763_800_020, 0) // the start of a minute
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: rs, Observer: m, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	override := hit{[]string{"api_key", "k9"}, 1}.descriptor()
	override.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	for i, r := range [][]*rlv3.RateLimitDescriptor{
		// api_key (limit 10, near-limit threshold 8), hits used before:
		{hit{[]string{"api_key", "k1"}, 7}.descriptor()},                                                // 0: within 7
		{hit{[]string{"api_key", "k1"}, 3}.descriptor()},                                                // 7: within 3, near 2
		{hit{[]string{"api_key", "k1"}, 4}.descriptor()},                                                // 10: over 4
		{hit{[]string{"api_key", "k2"}, 9}.descriptor()},                                                // 0: within 9, near 1
		{hit{[]string{"api_key", "k2"}, 3}.descriptor()},                                                // 9: over 2, near 1
		{hit{[]string{"user", "bot1"}, 1}.descriptor(), hit{[]string{"api_key", "k1"}, 1}.descriptor()}, // denied by api_key (over 1); user within 1
		{hit{[]string{"user", "bot2"}, 1}.descriptor()},                                                 // user_bot*: within 1
		{hit{[]string{"api_key", "k3", "path", "/x"}, 2}.descriptor()},                                  // api_key.path: within 2
		// shadow (limit 2, threshold 1): counted even when over.
		{hit{[]string{"shadow", "s"}, 1}.descriptor()}, // 0: within 1
		{hit{[]string{"shadow", "s"}, 3}.descriptor()}, // 1: over 2, near 1, shadow 2
		{hit{[]string{"shadow", "s"}, 1}.descriptor()}, // 4: over 1, shadow 1
		{hit{[]string{"tier", "gold", "region", "eu", "zone", "z1"}, 1}.descriptor()},
		{hit{[]string{"named", "n"}, 1}.descriptor()},
		{hit{[]string{"detailed", "/login"}, 1}.descriptor()},
		{hit{[]string{"ip", "10.0.0.1"}, 1}.descriptor()},
		{hit{[]string{"host", "a.example"}, 1}.descriptor()},
		{hit{[]string{"files", "docs/a"}, 1}.descriptor()},
		{hit{[]string{"files", "docs/b"}, 1}.descriptor()},
		{hit{[]string{"route", "draw", "method", "GET"}, 1}.descriptor()},
		{override}, // 1 per minute, threshold 0: within 1, near 1
		{hit{[]string{"free", "x"}, 1}.descriptor(), hit{[]string{"listed", "y"}, 1}.descriptor()},
	} {
		if _, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mapper", Descriptors: r}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	want := refExposition([]refSeries{
		// stats key mapper.api_key
		{labels: `domain="mapper",key1="api_key"`, total: 7 + 3 + 4 + 9 + 3 + 1, within: 7 + 3 + 9, near: 2 + 1 + 1, over: 4 + 2 + 1},
		// mapper.api_key.path
		{labels: `domain="mapper",key1="api_key",key2="path"`, total: 2, within: 2},
		// mapper.user_bot*: a wildcard shows its pattern
		{labels: `domain="mapper",key1="user_bot*"`, total: 2, within: 2},
		// mapper.shadow
		{labels: `domain="mapper",key1="shadow"`, total: 5, within: 1, near: 1, over: 3, shadow: 3},
		// mapper.tier_gold.region.zone
		{labels: `domain="mapper",key1="tier_gold",key2="region"`, total: 1, within: 1},
		// mapper.named: the path, not the name
		{labels: `domain="mapper",key1="named"`, total: 1, within: 1},
		// mapper.detailed_/login
		{labels: `domain="mapper",key1="detailed_/login"`, total: 1, within: 1},
		// mapper.ip_10.0.0.1, cleaned
		{labels: `domain="mapper",key1="ip_10_0_0_1"`, total: 1, within: 1},
		// mapper.host_a.example: the value's dot splits it
		{labels: `domain="mapper",key1="host_a",key2="example"`, total: 1, within: 1},
		// mapper.files_docs/*: share_threshold keeps the pattern
		{labels: `domain="mapper",key1="files_docs/*"`, total: 2, within: 2},
		// mapper.route_draw.method_GET
		{labels: `domain="mapper",key1="route_draw",key2="method_GET"`, total: 1, within: 1},
		// an override, bounded
		{labels: `domain="mapper",key1="override"`, total: 1, within: 1, near: 1},
	})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), refMetricNames()...); err != nil {
		t.Error(err)
	}
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Take(context.Context, time.Time, []window.Counter, []window.Result) (bool, error) {
	return false, window.ErrStore
}
func (failingStore) Ping(context.Context) error { return window.ErrStore }

// TestReferenceErrorMetrics: a failed store call is the reference's
// redis_error and counts the hits in total_hits alone, as the reference
// counts them before asking Redis; a malformed request is its
// service_error; rules loads are its config_load_success and _error.
func TestReferenceErrorMetrics(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t, Options{})
	rs, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(
		"domain: f\nfailure_mode: allow\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: failingStore{}, Rules: rs, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "f", Descriptors: []*rlv3.RateLimitDescriptor{hit{[]string{"k", "v"}, 3}.descriptor()}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*rlsv3.RateLimitRequest{{Domain: "f"}, {Descriptors: []*rlv3.RateLimitDescriptor{hit{[]string{"k", "v"}, 1}.descriptor()}}} {
		if _, err := srv.ShouldRateLimit(ctx, bad); err == nil {
			t.Fatalf("ShouldRateLimit(%v) = nil error, want InvalidArgument", bad)
		}
	}
	m.ObserveReload(nil)
	m.ObserveReload(fmt.Errorf("bad"))
	m.ObserveReload(nil)
	want := refExposition([]refSeries{{labels: `domain="f",key1="k"`, total: 3}}) + `
# HELP ratelimit_service_should_rate_limit_error Requests that failed, as envoyproxy/ratelimit counts them: redis_error per failed store call, service_error per malformed request.
# TYPE ratelimit_service_should_rate_limit_error counter
ratelimit_service_should_rate_limit_error{err_type="redis_error"} 1
ratelimit_service_should_rate_limit_error{err_type="service_error"} 2
# HELP ratelimit_service_config_load_success Rules loads that succeeded, the load at start included, as envoyproxy/ratelimit counts them.
# TYPE ratelimit_service_config_load_success counter
ratelimit_service_config_load_success 2
# HELP ratelimit_service_config_load_error Rules loads that failed, as envoyproxy/ratelimit counts them.
# TYPE ratelimit_service_config_load_error counter
ratelimit_service_config_load_error 1
`
	names := append(refMetricNames(), "ratelimit_service_should_rate_limit_error", "ratelimit_service_config_load_success", "ratelimit_service_config_load_error")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestDetailedStatsKeys: a detailed_metric limit's stats key holds every
// entry's value, so values before the last that differ get labels of
// their own, while the decisions' rule label keeps the last value alone.
func TestDetailedStatsKeys(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t, Options{})
	l := &rules.Limit{Rule: "tenant.user", Path: "tenant.user", RequestsPerUnit: 10, DetailedMetric: true}
	for _, e := range [][]string{{"a", "u1"}, {"b", "u1"}, {"a", "u1"}} {
		d := dec("d", l, e[1], envoyrls.OutcomeOK)
		d.NearLimit = 8
		d.Entries = hit{[]string{"tenant", e[0], "user", e[1]}, 1}.descriptor().Entries
		m.Decision(d)
	}
	want := refExposition([]refSeries{
		{labels: `domain="d",key1="tenant_a",key2="user_u1"`, total: 2, within: 2},
		{labels: `domain="d",key1="tenant_b",key2="user_u1"`, total: 1, within: 1},
	})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), refMetricNames()...); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("d", "tenant.user_u1", "ok")); got != 3 {
		t.Errorf(`ratelimit_decisions_total{rule="tenant.user_u1",outcome="ok"} = %v, want 3`, got)
	}
}

// TestReferenceCallMetrics: ObserveCall is the reference's
// total_requests and response_time of ShouldRateLimit, the time in seconds
// by default and in milliseconds with ResponseTimeAsMilliseconds (its
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS), in the buckets its mapper
// leaves at statsd_exporter's defaults.
func TestReferenceCallMetrics(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ms   bool
		sum  float64 // of 3ms, 40ms and 1.5s
		le   string  // the bucket the 40ms call is the first of: 0.05s, or past 10ms
	}{
		{"seconds", false, 1.543, "0.05"},
		{"milliseconds", true, 1543, "+Inf"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, reg := newTestMetrics(t, Options{ResponseTimeAsMilliseconds: tt.ms})
			for _, d := range []time.Duration{3 * time.Millisecond, 40 * time.Millisecond, 1500 * time.Millisecond} {
				m.ObserveCall(d)
			}
			if n := testutil.ToFloat64(m.ref.calls); n != 3 {
				t.Errorf("total_requests = %v, want 3", n)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var h *dto.Histogram
			for _, mf := range mfs {
				if mf.GetName() == "ratelimit_service_response_time_seconds" {
					if l := mf.Metric[0].Label; len(l) != 1 || l[0].GetName() != "grpc_method" || l[0].GetValue() != "ShouldRateLimit" {
						t.Errorf("labels %v, want grpc_method=ShouldRateLimit", l)
					}
					h = mf.Metric[0].Histogram
				}
			}
			if h == nil {
				t.Fatal("no ratelimit_service_response_time_seconds")
			}
			if got := h.GetSampleSum(); math.Abs(got-tt.sum) > tt.sum*1e-9 || h.GetSampleCount() != 3 {
				t.Errorf("response_time sum %v count %d, want %v and 3", got, h.GetSampleCount(), tt.sum)
			}
			// The first bucket holding two calls.
			first := "+Inf"
			for _, b := range h.Bucket {
				if b.GetCumulativeCount() >= 2 {
					first = strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
					break
				}
			}
			if first != tt.le {
				t.Errorf("the 40ms call's bucket is le=%s, want %s", first, tt.le)
			}
		})
	}
}

// TestAdmissionMetrics: the events of the cap on concurrent calls move
// this project's metrics and the reference's request_admission ones (as
// its Prometheus mapper names them) alike.
func TestAdmissionMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		events                      []envoyrls.Admission
		admitted, rejected, running float64
	}{
		{"none", nil, 0, 0, 0},
		{"two in flight, one refused", []envoyrls.Admission{envoyrls.AdmissionAdmitted, envoyrls.AdmissionAdmitted, envoyrls.AdmissionRejected}, 2, 1, 2},
		{"one done, another admitted", []envoyrls.Admission{envoyrls.AdmissionAdmitted, envoyrls.AdmissionAdmitted, envoyrls.AdmissionRejected,
			envoyrls.AdmissionReleased, envoyrls.AdmissionAdmitted}, 3, 1, 2},
		{"all done", []envoyrls.Admission{envoyrls.AdmissionAdmitted, envoyrls.AdmissionRejected, envoyrls.AdmissionReleased}, 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, reg := newTestMetrics(t, Options{})
			for _, e := range tt.events {
				m.Admission(e)
			}
			text := gatherText(t, reg)
			for _, prefix := range []string{"ratelimit_calls", "ratelimit_service_request_admission"} {
				for _, want := range []string{
					prefix + "_admitted_total{} " + formatFloat(tt.admitted),
					prefix + "_rejected_total{} " + formatFloat(tt.rejected),
					prefix + "_in_flight{} " + formatFloat(tt.running),
				} {
					if !strings.Contains(text, want+"\n") {
						t.Errorf("metrics lack %q:\n%s", want, text)
					}
				}
			}
		})
	}
}
