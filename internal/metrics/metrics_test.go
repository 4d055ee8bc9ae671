package metrics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func newTestMetrics(t testing.TB, o Options) (*Recorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	m, err := New(o)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	return m, reg
}

func TestMetricsDecisions(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t, Options{})
	plain := &rules.Limit{Rule: "api_key"}
	detailed := &rules.Limit{Rule: "path", DetailedMetric: true}
	m.Decision(dec("edge", plain, "ignored", envoyrls.OutcomeOK))
	m.Decision(dec("edge", plain, "other", envoyrls.OutcomeOK))
	m.Decision(dec("edge", plain, "", envoyrls.OutcomeOverLimit))
	m.Decision(dec("edge", detailed, "/login", envoyrls.OutcomeNearLimit))
	m.Decision(dec("edge", detailed, "/login", envoyrls.OutcomeNearLimit))
	m.Decision(dec("edge", detailed, "/home", envoyrls.OutcomeShadowOverLimit))
	m.Decision(dec("internal", plain, "", envoyrls.OutcomeFailureMode))

	// Handles resolve every outcome of a (domain, rule) at once, so zero
	// series exist too: count them, then check the ones that moved.
	if got, err := testutil.GatherAndCount(reg, "ratelimit_decisions_total"); err != nil || got != 4*numOutcomes {
		t.Errorf("ratelimit_decisions_total has %d series (%v), want %d: 4 label sets x %d outcomes", got, err, 4*numOutcomes, numOutcomes)
	}
	text := gatherText(t, reg)
	for _, want := range []string{
		`ratelimit_decisions_total{domain="edge",outcome="ok",rule="api_key"} 2`,
		`ratelimit_decisions_total{domain="edge",outcome="over_limit",rule="api_key"} 1`,
		`ratelimit_decisions_total{domain="edge",outcome="near_limit",rule="path_/login"} 2`,
		`ratelimit_decisions_total{domain="edge",outcome="shadow_over_limit",rule="path_/home"} 1`,
		`ratelimit_decisions_total{domain="internal",outcome="failure_mode",rule="api_key"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q; got\n%s", want, text)
		}
	}
}

// dec is a decision of one hit on an empty counter.
func dec(domain string, l *rules.Limit, value string, o envoyrls.Outcome) envoyrls.Decision {
	return envoyrls.Decision{Domain: domain, Limit: l, Value: value, Outcome: o, Hits: 1}
}

// gatherText renders reg in the text exposition format.
func gatherText(t testing.TB, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			b.WriteString(mf.GetName() + "{")
			for i, lp := range m.Label {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(lp.GetName() + `="` + lp.GetValue() + `"`)
			}
			b.WriteString("} ")
			switch {
			case m.Counter != nil:
				b.WriteString(formatFloat(m.Counter.GetValue()))
			case m.Gauge != nil:
				b.WriteString(formatFloat(m.Gauge.GetValue()))
			case m.Histogram != nil:
				b.WriteString("count=" + formatFloat(float64(m.Histogram.GetSampleCount())))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func TestMetricsStoreAndReload(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t, Options{})
	m.StoreCall(300*time.Microsecond, nil)
	m.StoreCall(2*time.Millisecond, window.ErrStore)
	if got := testutil.ToFloat64(m.failing); got != 1 {
		t.Errorf("ratelimit_failure_mode_active = %v after a failed call, want 1", got)
	}
	if got := testutil.ToFloat64(m.storeErrors); got != 1 {
		t.Errorf("ratelimit_store_errors_total = %v, want 1", got)
	}
	m.StoreCall(time.Millisecond, nil)
	if got := testutil.ToFloat64(m.failing); got != 0 {
		t.Errorf("ratelimit_failure_mode_active = %v after a good call, want 0", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_store_duration_seconds Latency of counter store calls, failed ones included.
# TYPE ratelimit_store_duration_seconds histogram
ratelimit_store_duration_seconds_bucket{le="5e-05"} 0
ratelimit_store_duration_seconds_bucket{le="0.0001"} 0
ratelimit_store_duration_seconds_bucket{le="0.00025"} 0
ratelimit_store_duration_seconds_bucket{le="0.0005"} 1
ratelimit_store_duration_seconds_bucket{le="0.001"} 2
ratelimit_store_duration_seconds_bucket{le="0.0025"} 3
ratelimit_store_duration_seconds_bucket{le="0.005"} 3
ratelimit_store_duration_seconds_bucket{le="0.01"} 3
ratelimit_store_duration_seconds_bucket{le="0.025"} 3
ratelimit_store_duration_seconds_bucket{le="0.05"} 3
ratelimit_store_duration_seconds_bucket{le="0.1"} 3
ratelimit_store_duration_seconds_bucket{le="+Inf"} 3
ratelimit_store_duration_seconds_sum 0.0033
ratelimit_store_duration_seconds_count 3
`), "ratelimit_store_duration_seconds"); err != nil {
		t.Error(err)
	}

	m.ObserveReload(nil)
	m.ObserveReload(errors.New("bad"))
	if got := testutil.ToFloat64(m.reloadSuccess); got != 0 {
		t.Errorf("ratelimit_rules_last_reload_success = %v after a failed reload, want 0", got)
	}
	m.ObserveReload(nil)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_reloads_total Rules loads by result, the load at start included.
# TYPE ratelimit_reloads_total counter
ratelimit_reloads_total{result="error"} 1
ratelimit_reloads_total{result="ok"} 2
# HELP ratelimit_rules_last_reload_success 1 if the last rules load succeeded, 0 if it failed and older rules are being served.
# TYPE ratelimit_rules_last_reload_success gauge
ratelimit_rules_last_reload_success 1
`), "ratelimit_reloads_total", "ratelimit_rules_last_reload_success"); err != nil {
		t.Error(err)
	}
}

func TestMetricsStoreCollectors(t *testing.T) {
	t.Parallel()
	var trips uint64 = 41
	_, reg := newTestMetrics(t, Options{
		RoundTrips: func() uint64 { return trips },
		PoolStats: func() *PoolStats {
			return &PoolStats{Hits: 10, Misses: 2, Timeouts: 1, TotalConns: 5, IdleConns: 3, StaleConns: 4}
		},
	})
	trips++
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_store_round_trips_total Calls sent to the counter store (Redis round trips).
# TYPE ratelimit_store_round_trips_total counter
ratelimit_store_round_trips_total 42
# HELP ratelimit_redis_pool_hits_total Times a free connection was found in the pool.
# TYPE ratelimit_redis_pool_hits_total counter
ratelimit_redis_pool_hits_total 10
# HELP ratelimit_redis_pool_misses_total Times no free connection was in the pool, so one was dialled.
# TYPE ratelimit_redis_pool_misses_total counter
ratelimit_redis_pool_misses_total 2
# HELP ratelimit_redis_pool_timeouts_total Times waiting for a pool connection timed out.
# TYPE ratelimit_redis_pool_timeouts_total counter
ratelimit_redis_pool_timeouts_total 1
# HELP ratelimit_redis_pool_stale_connections_total Stale connections removed from the pool.
# TYPE ratelimit_redis_pool_stale_connections_total counter
ratelimit_redis_pool_stale_connections_total 4
# HELP ratelimit_redis_pool_connections Connections in the pool.
# TYPE ratelimit_redis_pool_connections gauge
ratelimit_redis_pool_connections 5
# HELP ratelimit_redis_pool_idle_connections Idle connections in the pool.
# TYPE ratelimit_redis_pool_idle_connections gauge
ratelimit_redis_pool_idle_connections 3
`), "ratelimit_store_round_trips_total", "ratelimit_redis_pool_hits_total", "ratelimit_redis_pool_misses_total",
		"ratelimit_redis_pool_timeouts_total", "ratelimit_redis_pool_stale_connections_total",
		"ratelimit_redis_pool_connections", "ratelimit_redis_pool_idle_connections"); err != nil {
		t.Error(err)
	}
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if n, err := testutil.GatherAndCount(reg, want); err != nil || n == 0 {
			t.Errorf("GatherAndCount(%s) = %d, %v, want > 0", want, n, err)
		}
	}
}

// TestMetricsLint holds every metric of ours to Prometheus naming
// conventions (units, _total on counters, no camel case). The reference's
// names are what its mapper made them: their counters have no _total.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t, Options{RoundTrips: func() uint64 { return 0 }, PoolStats: func() *PoolStats { return &PoolStats{} }})
	m.Decision(dec("d", &rules.Limit{Rule: "r"}, "", envoyrls.OutcomeOK))
	m.StoreCall(time.Millisecond, nil)
	m.ObserveReload(nil)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		reference := strings.HasPrefix(p.Metric, "ratelimit_service_") && strings.Contains(p.Text, `"_total" suffix`)
		if strings.HasPrefix(p.Metric, "ratelimit_") && !reference {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{}); err == nil {
		t.Error("New without a Registerer = nil error, want one")
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Registerer: reg}); err == nil {
		t.Error("New twice on one registry = nil error, want AlreadyRegistered")
	}
}

// TestMetricsDecisionAllocs keeps the request path allocation-free once a
// label set has been seen.
func TestMetricsDecisionAllocs(t *testing.T) {
	m, _ := newTestMetrics(t, Options{})
	detailed := dec("edge", &rules.Limit{Rule: "path", Path: "path", RequestsPerUnit: 10, DetailedMetric: true}, "/login", envoyrls.OutcomeOverLimit)
	detailed.Entries = []*rlv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/login"}}
	plain := dec("edge", &rules.Limit{Rule: "per_key", Path: "api_key", RequestsPerUnit: 10}, "", envoyrls.OutcomeNearLimit)
	plain.Entries, plain.Used, plain.Hits, plain.NearLimit = []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}}, 7, 3, 8
	for _, d := range []envoyrls.Decision{detailed, plain} {
		m.Decision(d)
		if got := testing.AllocsPerRun(100, func() {
			m.Decision(d)
			m.StoreCall(time.Millisecond, nil)
		}); got != 0 {
			t.Errorf("Decision(%s)+StoreCall allocate %v times per call, want 0", d.Limit.Rule, got)
		}
	}
}

// TestMetricsObserveServer checks the wiring with a real Server: the rule
// label is the limit's rule and outcomes follow decisions.
func TestMetricsObserveServer(t *testing.T) {
	t.Parallel()
	const edge = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	m, reg := newTestMetrics(t, Options{})
	rs, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(edge)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_763_800_020_000).Add(15 * time.Second) // 15 s into a minute window
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: rs, Now: func() time.Time { return now }, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	call := func(key, value string) {
		t.Helper()
		_, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
		}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
	for range 3 {
		call("api_key", "k1")
	}
	call("path", "/x")
	back := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}},
		HitsAddend: wrapperspb.UInt64(5), IsNegativeHits: true}
	if resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{back}}); err != nil ||
		resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Errorf("refund of 5 = %v, %v; want OK, 2 remaining (floored at 0)", resp, err)
	}
	text := gatherText(t, reg)
	for _, want := range []string{
		`ratelimit_decisions_total{domain="edge",outcome="near_limit",rule="api_key"} 1`,
		`ratelimit_decisions_total{domain="edge",outcome="over_limit",rule="api_key"} 1`,
		`ratelimit_decisions_total{domain="edge",outcome="ok",rule="path_/x"} 1`,
		`ratelimit_decisions_total{domain="edge",outcome="ok",rule="api_key"} 2`,
		`ratelimit_refunded_hits_total{domain="edge",rule="api_key"} 5`,
		`ratelimit_store_duration_seconds{} count=5`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q; got\n%s", want, text)
		}
	}
	if strings.Contains(text, `rule="api_key_k1"`) {
		t.Errorf("metrics carry the raw value of a rule without detailed_metric:\n%s", text)
	}
}

// TestMetricsValueToMetric: value_to_metric puts the request's values in
// the rule label as envoyproxy/ratelimit's stats key has them (less the
// domain, which is its own label); detailed_metric takes precedence; a rule
// with neither keeps one label whatever the values.
func TestMetricsValueToMetric(t *testing.T) {
	t.Parallel()
	const v = `
domain: v
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: hour, requests_per_unit: 100}
  - key: both
    value_to_metric: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	m, reg := newTestMetrics(t, Options{})
	rs, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(v)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: rs, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range [][]string{
		{"route", "draw", "http_method", "GET", "subject_id", "1"},
		{"route", "draw", "http_method", "GET", "subject_id", "2"},
		{"route", "web", "http_method", "POST", "subject_id", "1"},
		{"both", "b1"},
		{"plain", "p1"}, {"plain", "p2"},
	} {
		var entries []*rlv3.RateLimitDescriptor_Entry
		for i := 0; i < len(e); i += 2 {
			entries = append(entries, &rlv3.RateLimitDescriptor_Entry{Key: e[i], Value: e[i+1]})
		}
		if _, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "v", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries}}}); err != nil {
			t.Fatal(err)
		}
	}
	text := gatherText(t, reg)
	for _, want := range []string{
		`ratelimit_decisions_total{domain="v",outcome="ok",rule="route_draw.http_method_GET.subject_id"} 2`,
		`ratelimit_decisions_total{domain="v",outcome="ok",rule="route_web.http_method_POST.subject_id"} 1`,
		`ratelimit_decisions_total{domain="v",outcome="ok",rule="both_b1"} 1`,
		`ratelimit_decisions_total{domain="v",outcome="ok",rule="plain"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q; got\n%s", want, text)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "ratelimit_decisions_total"); err != nil || n != 4*numOutcomes {
		t.Errorf("ratelimit_decisions_total has %d series (%v), want %d", n, err, 4*numOutcomes)
	}
}

func BenchmarkMetricsDecision(b *testing.B) {
	m, _ := newTestMetrics(b, Options{})
	path := "api_key"
	l := &rules.Limit{Rule: path, Path: path} // as rules.Load makes an unnamed limit
	m.Decision(dec("edge", l, "", envoyrls.OutcomeOK))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Decision(dec("edge", l, "", envoyrls.OutcomeOK))
		}
	})
}
