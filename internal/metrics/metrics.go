package metrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
)

// Options configure a Recorder. Registerer is required; the other fields
// add optional collectors.
type Options struct {
	// Registerer receives every collector. Use a registry of your own, not
	// prometheus.DefaultRegisterer, so two servers in one process (tests)
	// do not collide.
	Registerer prometheus.Registerer
	// RoundTrips, when set, is exported as ratelimit_store_round_trips_total;
	// *redisstore.Store has a RoundTrips method to pass here. It is called at
	// each scrape and must be safe for concurrent use.
	RoundTrips func() uint64
	// PoolStats, when set, exports a Redis connection pool as
	// ratelimit_redis_pool_*. It is called at each scrape; nil statistics
	// export nothing for that scrape.
	PoolStats func() *PoolStats
	// ResponseTimeAsMilliseconds makes ratelimit_service_response_time_seconds
	// count milliseconds, the reference's unit before its #1104 (its
	// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS), for dashboards built on
	// that; false counts seconds, as the reference does by default since.
	ResponseTimeAsMilliseconds bool
}

// PoolStats are a Redis client's connection pool counters, as go-redis's
// PoolStats has them.
type PoolStats struct {
	Hits       uint32 // times a free connection was found in the pool
	Misses     uint32 // times no free connection was in the pool
	Timeouts   uint32 // times waiting for a connection timed out
	StaleConns uint32 // stale connections removed from the pool
	TotalConns uint32 // connections in the pool
	IdleConns  uint32 // idle connections in the pool
}

// Recorder is a Prometheus envoyrls.Observer, plus the reload metrics a
// reload.Watcher reports through ObserveReload. It is safe for concurrent
// use.
//
// Metric names:
//
//	ratelimit_decisions_total{domain,rule,outcome}   counter
//	ratelimit_refunded_hits_total{domain,rule}       counter, hits given back (is_negative_hits)
//	ratelimit_store_duration_seconds                 histogram
//	ratelimit_store_errors_total                     counter
//	ratelimit_failure_mode_active                    gauge, 1 while the store fails
//	ratelimit_reloads_total{result="ok|error"}       counter, the load at start included
//	ratelimit_rules_last_reload_success              gauge, 1 or 0
//	ratelimit_store_round_trips_total                counter, with RoundTrips
//	ratelimit_redis_pool_*                           with PoolStats
//	ratelimit_calls_admitted_total                   counter, calls admitted under the concurrency cap
//	ratelimit_calls_rejected_total                   counter, calls refused over it (ResourceExhausted)
//	ratelimit_calls_in_flight                        gauge, calls admitted and not yet done
//
// envoyproxy/ratelimit's, under the names and labels its Prometheus mapper
// gives them (see docs/operations.md):
//
//	ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,within_limit,shadow_mode}{domain,key1[,key2]}
//	ratelimit_service_should_rate_limit_error{err_type}
//	ratelimit_service_config_load_{success,error}
//	ratelimit_service_total_requests{grpc_method}            counter, with ObserveCall
//	ratelimit_service_response_time_seconds{grpc_method}     histogram, with ObserveCall
//	ratelimit_service_request_admission_{admitted_total,rejected_total,in_flight}
//
// and the Go runtime and process collectors.
type Recorder struct {
	decisions     *prometheus.CounterVec
	refunded      *prometheus.CounterVec
	storeDuration prometheus.Histogram
	storeErrors   prometheus.Counter
	failing       prometheus.Gauge
	reloadOK      prometheus.Counter
	reloadError   prometheus.Counter
	reloadSuccess prometheus.Gauge
	admitted      prometheus.Counter
	rejected      prometheus.Counter
	inFlight      prometheus.Gauge
	ref           *refMetrics

	// handles caches the counters of one label set, so the request path
	// does no label hashing and, once warm, no allocation.
	handles sync.Map // handleKey -> *handles
	// detailed holds the handles of detailed_metric stats keys that differ
	// from the first one seen for their handleKey.
	detailed sync.Map // detailedKey -> *handles
}

var _ envoyrls.Observer = (*Recorder)(nil)

const numOutcomes = int(envoyrls.OutcomeFailureMode) + 1

// handleKey identifies a limit's label sets. value is "" unless the limit
// asks for detailed metrics or value_to_metric. (Few fields: sync.Map
// hashes a struct key field by field, at a cost per field.)
type handleKey struct {
	domain, rule, path, value string
}

// detailedKey identifies the label sets of a detailed_metric limit whose
// stats key (every entry's value) differs from the one its handleKey's
// handles were made for.
type detailedKey struct {
	handleKey
	statsKey string
}

// handles are the counters of one label set: the decisions by outcome,
// and the reference's stats of statsKey (nil where its mapper maps none).
type handles struct {
	rule      string // the rule label
	decisions [numOutcomes]prometheus.Counter
	statsKey  string // the reference's stats key, domain included
	stats     [numStats]prometheus.Counter
}

// StoreDurationBuckets are the buckets of ratelimit_store_duration_seconds,
// in seconds: from 50µs (a local Redis or the memory store) to 100ms, beyond
// which Envoy has long given up.
var StoreDurationBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// New registers the collectors on o.Registerer and returns the Recorder. It
// fails when a collector is already registered there.
func New(o Options) (*Recorder, error) {
	if o.Registerer == nil {
		return nil, errors.New("metrics: Options.Registerer is nil")
	}
	m := &Recorder{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Decisions per matched limit, by domain, rule (with request values for detailed_metric and value_to_metric rules) and outcome.",
		}, []string{"domain", "rule", "outcome"}),
		refunded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_refunded_hits_total",
			Help: "Hits that requests with is_negative_hits asked to give back, by domain and rule (labelled as in ratelimit_decisions_total).",
		}, []string{"domain", "rule"}),
		storeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_store_duration_seconds",
			Help:    "Latency of counter store calls, failed ones included.",
			Buckets: StoreDurationBuckets,
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_store_errors_total",
			Help: "Counter store calls that failed, so failure modes answered.",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_failure_mode_active",
			Help: "1 while the last counter store call failed and failure modes answer, else 0.",
		}),
		reloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_rules_last_reload_success",
			Help: "1 if the last rules load succeeded, 0 if it failed and older rules are being served.",
		}),
		admitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_calls_admitted_total",
			Help: "ShouldRateLimit calls admitted under -max-concurrent-requests; 0 without a cap.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_calls_rejected_total",
			Help: "ShouldRateLimit calls refused with ResourceExhausted because -max-concurrent-requests calls were in progress.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_calls_in_flight",
			Help: "ShouldRateLimit calls admitted under -max-concurrent-requests and not yet done; 0 without a cap.",
		}),
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_reloads_total",
		Help: "Rules loads by result, the load at start included.",
	}, []string{"result"})
	m.reloadOK = reloads.WithLabelValues("ok")
	m.reloadError = reloads.WithLabelValues("error")

	ref, refCollectors := newRefMetrics(o.ResponseTimeAsMilliseconds)
	m.ref = ref
	cs := append([]prometheus.Collector{
		m.decisions, m.refunded, m.storeDuration, m.storeErrors, m.failing, reloads, m.reloadSuccess,
		m.admitted, m.rejected, m.inFlight,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, refCollectors...)
	if o.RoundTrips != nil {
		f := o.RoundTrips
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ratelimit_store_round_trips_total",
			Help: "Calls sent to the counter store (Redis round trips).",
		}, func() float64 { return float64(f()) }))
	}
	if o.PoolStats != nil {
		cs = append(cs, newPoolCollector(o.PoolStats))
	}
	for _, c := range cs {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Decision counts one decision. It implements envoyrls.Observer. The rule
// label is the limit's Rule; with DetailedMetric, Rule, "_" and d.Value;
// else with ValueToMetric, d.Value (the label with request values, as
// envoyproxy/ratelimit's value_to_metric makes it). Other limits ignore
// d.Value, so their labels stay bounded. The reference's counters get
// d.Hits as its limiter adds them (see add), labelled from its stats key
// as its mapper labels them.
func (m *Recorder) Decision(d envoyrls.Decision) {
	l := d.Limit
	k := handleKey{domain: d.Domain, rule: l.Rule, path: l.Path}
	if l.DetailedMetric || l.ValueToMetric {
		k.value = d.Value
	}
	h, ok := m.handles.Load(k)
	if !ok {
		h = m.newHandles(k, &d)
	}
	hs := h.(*handles)
	if l.DetailedMetric {
		// Earlier entries show in the stats key too: check that they are
		// the ones these handles were made for, on the stack.
		var buf [128]byte
		key := appendStatsKey(append(append(buf[:0], d.Domain...), '.'), &d)
		if string(key) != hs.statsKey {
			hs = m.detailedHandles(k, &d, string(key))
		}
	}
	hs.decisions[d.Outcome].Inc()
	add(&hs.stats, &d)
	if d.Refunded > 0 {
		// Rare: a series appears only for rules that get refunds.
		m.refunded.WithLabelValues(d.Domain, hs.rule).Add(float64(d.Refunded))
	}
}

// detailedHandles returns the handles of a detailed_metric limit whose
// stats key is not that of its first handles.
func (m *Recorder) detailedHandles(k handleKey, d *envoyrls.Decision, statsKey string) *handles {
	dk := detailedKey{k, statsKey}
	if h, ok := m.detailed.Load(dk); ok {
		return h.(*handles)
	}
	got, _ := m.detailed.LoadOrStore(dk, m.makeHandles(k, d))
	return got.(*handles)
}

func (m *Recorder) newHandles(k handleKey, d *envoyrls.Decision) *handles {
	// Two first decisions may race here; both resolved the same children.
	got, _ := m.handles.LoadOrStore(k, m.makeHandles(k, d))
	return got.(*handles)
}

// makeHandles resolves the counters of d's label sets; k is d's handleKey.
func (m *Recorder) makeHandles(k handleKey, d *envoyrls.Decision) *handles {
	rule := k.rule
	switch {
	case d.Limit.DetailedMetric:
		rule += "_" + k.value
	case k.value != "":
		rule = k.value // value_to_metric's label
	}
	h := &handles{rule: rule, statsKey: string(appendStatsKey([]byte(k.domain+"."), d))}
	for o := range h.decisions {
		h.decisions[o] = m.decisions.WithLabelValues(k.domain, rule, envoyrls.Outcome(o).String())
	}
	h.stats = m.ref.counters(h.statsKey)
	return h
}

// StoreCall records a store call's latency and error, and whether failure
// modes are answering. It implements envoyrls.Observer.
func (m *Recorder) StoreCall(d time.Duration, err error) {
	m.storeDuration.Observe(d.Seconds())
	if err != nil {
		m.storeErrors.Inc()
		m.ref.redisError.Inc()
		m.failing.Set(1)
		return
	}
	m.failing.Set(0)
}

// ObserveCall records one ShouldRateLimit call over gRPC, answered or
// failed, that took d from receipt to answer: the reference's
// ratelimit_service_total_requests and ratelimit_service_response_time_seconds
// (in milliseconds with Options.ResponseTimeAsMilliseconds), which its
// gRPC interceptor records. Unlike the reference's, d is not rounded down
// to a whole millisecond.
func (m *Recorder) ObserveCall(d time.Duration) {
	m.ref.calls.Inc()
	m.ref.callTime.Observe(d.Seconds() * m.ref.callUnit)
}

// InvalidRequest counts a malformed request as the reference's
// service_error. It implements envoyrls.Observer.
func (m *Recorder) InvalidRequest() { m.ref.serviceError.Inc() }

// Admission counts an event of the cap on concurrent calls, under this
// project's names and the reference's (its request_admission stats, as
// its Prometheus mapper names them). It implements envoyrls.Observer.
func (m *Recorder) Admission(a envoyrls.Admission) {
	switch a {
	case envoyrls.AdmissionAdmitted:
		m.admitted.Inc()
		m.inFlight.Inc()
		m.ref.admitted.Inc()
		m.ref.inFlight.Inc()
	case envoyrls.AdmissionReleased:
		m.inFlight.Dec()
		m.ref.inFlight.Dec()
	case envoyrls.AdmissionRejected:
		m.rejected.Inc()
		m.ref.rejected.Inc()
	}
}

// ObserveReload counts a rules load: err is nil when the new rules are
// being served. It fits reload.Options.OnReload.
func (m *Recorder) ObserveReload(err error) {
	if err != nil {
		m.reloadError.Inc()
		m.ref.loadError.Inc()
		m.reloadSuccess.Set(0)
		return
	}
	m.reloadOK.Inc()
	m.ref.loadSuccess.Inc()
	m.reloadSuccess.Set(1)
}

// poolCollector exports Redis pool statistics, read at each scrape.
type poolCollector struct {
	stats                                      func() *PoolStats
	hits, misses, timeouts, stale, total, idle *prometheus.Desc
}

func newPoolCollector(stats func() *PoolStats) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("ratelimit_redis_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		stats:    stats,
		hits:     d("hits_total", "Times a free connection was found in the pool."),
		misses:   d("misses_total", "Times no free connection was in the pool, so one was dialled."),
		timeouts: d("timeouts_total", "Times waiting for a pool connection timed out."),
		stale:    d("stale_connections_total", "Stale connections removed from the pool."),
		total:    d("connections", "Connections in the pool."),
		idle:     d("idle_connections", "Idle connections in the pool."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hits, c.misses, c.timeouts, c.stale, c.total, c.idle} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(c.timeouts, prometheus.CounterValue, float64(s.Timeouts))
	ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(s.StaleConns))
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(s.TotalConns))
	ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(s.IdleConns))
}
