package metrics

import (
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
)

// The per-limit counters of envoyproxy/ratelimit, in the order of the rules
// of its Prometheus mapper (src/stats/prom/default_mapper.yaml), which is
// also the order in which a deeper key's regular expressions are tried.
const (
	statNearLimit = iota
	statOverLimit
	statTotalHits
	statWithinLimit
	statShadowMode
	numStats
)

// statNames are the stats' last name parts in the reference's statsd names,
// ratelimit.service.rate_limit.<stats key>.<stat>.
var statNames = [numStats]string{"near_limit", "over_limit", "total_hits", "within_limit", "shadow_mode"}

// statHelp describes the Prometheus metrics the reference's mapper makes of
// the stats.
var statHelp = [numStats]string{
	"Hits that took a limit past the near-limit ratio, as envoyproxy/ratelimit counts them.",
	"Hits over a limit (shadow mode included), as envoyproxy/ratelimit counts them.",
	"Hits of requests a limit applied to, as envoyproxy/ratelimit counts them.",
	"Hits within a limit, as envoyproxy/ratelimit counts them.",
	"Hits over a limit in shadow mode, as envoyproxy/ratelimit counts them.",
}

// statPrefix starts the statsd name of every per-limit stat of the
// reference.
const statPrefix = "ratelimit.service.rate_limit."

// deepRules are the mapper's regular expressions for a stats key of three
// or more parts, one per stat: they take the domain and the first two parts
// as domain, key1 and key2. statsd_exporter tries them in file order,
// unanchored, after the glob rules (two parts: domain and key1) failed.
var deepRules = func() (r [numStats]*regexp.Regexp) {
	for i, s := range statNames {
		r[i] = regexp.MustCompile(`ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.` + s)
	}
	return r
}()

// ipv4 is what the reference's SanitizeStatName finds to replace dots in.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStatName is the reference's cleaning of a stats key before it
// becomes part of a statsd name: ':' and '|' become '_', and so do the dots
// of anything that looks like an IPv4 address.
func sanitizeStatName(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// mapStat returns what the reference's mapper makes of stat of stats key
// key (domain, ".", then the key's parts): the stat whose metric it counts
// on (stat itself, unless a value's dots lead an earlier rule to match
// first) and its label values, domain and key1, or domain, key1 and key2.
// ok is false when no rule maps it.
func mapStat(key string, stat int) (metric int, labels []string, ok bool) {
	name := statPrefix + sanitizeStatName(key) + "." + statNames[stat]
	// The glob rules ratelimit.service.rate_limit.*.*.<stat>: six fields,
	// where '*' is any one field, even empty.
	if f := strings.Split(name, "."); len(f) == 6 {
		return stat, f[3:5], true
	}
	for i, re := range deepRules {
		if m := re.FindStringSubmatch(name); m != nil {
			return i, m[1:4], true
		}
	}
	return 0, nil, false
}

// refMetrics are the reference's metrics under the names its mapper gives
// them. A name has two shapes of labels, as the mapper's two rule shapes
// make them: (domain, key1) and (domain, key1, key2).
type refMetrics struct {
	short, long  [numStats]*prometheus.CounterVec
	redisError   prometheus.Counter
	serviceError prometheus.Counter
	loadSuccess  prometheus.Counter
	loadError    prometheus.Counter
	// calls and callTime are the reference's gRPC server metrics of
	// ShouldRateLimit (its src/metrics interceptor, grpc_method
	// "ShouldRateLimit"); callUnit is what callTime counts in: 1 for
	// seconds, 1000 for milliseconds.
	calls    prometheus.Counter
	callTime prometheus.Observer
	callUnit float64
	// admitted, rejected and inFlight are the reference's request_admission
	// stats of MAX_CONCURRENT_REQUESTS (newer than f2fb157, read at
	// f9b242bf).
	admitted, rejected prometheus.Counter
	inFlight           prometheus.Gauge
}

// unchecked registers a collector without describing it, so that one
// metric name can carry two sets of label names, as statsd_exporter's
// do. Its metrics are still checked at each scrape.
type unchecked struct{ prometheus.Collector }

func (unchecked) Describe(chan<- *prometheus.Desc) {}

// newRefMetrics makes the reference's metrics. With responseTimeMs,
// ratelimit_service_response_time_seconds counts milliseconds, as the
// reference's mapper did before its #1104 and does again with
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true; else seconds.
func newRefMetrics(responseTimeMs bool) (*refMetrics, []prometheus.Collector) {
	r := &refMetrics{callUnit: 1}
	if responseTimeMs {
		r.callUnit = 1000
	}
	var cs []prometheus.Collector
	for i, s := range statNames {
		opts := prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + s, Help: statHelp[i]}
		r.short[i] = prometheus.NewCounterVec(opts, []string{"domain", "key1"})
		r.long[i] = prometheus.NewCounterVec(opts, []string{"domain", "key1", "key2"})
		cs = append(cs, unchecked{r.short[i]}, unchecked{r.long[i]})
	}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_service_should_rate_limit_error",
		Help: "Requests that failed, as envoyproxy/ratelimit counts them: redis_error per failed store call, service_error per malformed request.",
	}, []string{"err_type"})
	r.redisError = errs.WithLabelValues("redis_error")
	r.serviceError = errs.WithLabelValues("service_error")
	r.loadSuccess = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_config_load_success",
		Help: "Rules loads that succeeded, the load at start included, as envoyproxy/ratelimit counts them.",
	})
	r.loadError = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_config_load_error",
		Help: "Rules loads that failed, as envoyproxy/ratelimit counts them.",
	})
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_service_total_requests",
		Help: "ShouldRateLimit calls over gRPC, answered or failed, as envoyproxy/ratelimit counts them.",
	}, []string{"grpc_method"})
	unit := "seconds"
	if responseTimeMs {
		unit = "milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS), whatever the name says"
	}
	// statsd_exporter's default buckets, which the reference's mapper
	// keeps, in either unit.
	callTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ratelimit_service_response_time_seconds",
		Help:    "Time to answer a ShouldRateLimit call over gRPC, as envoyproxy/ratelimit measures it, in " + unit + ".",
		Buckets: prometheus.DefBuckets,
	}, []string{"grpc_method"})
	r.calls = calls.WithLabelValues("ShouldRateLimit")
	r.callTime = callTime.WithLabelValues("ShouldRateLimit")
	r.admitted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_request_admission_admitted_total",
		Help: "ShouldRateLimit calls admitted under MAX_CONCURRENT_REQUESTS, as envoyproxy/ratelimit counts them.",
	})
	r.rejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_request_admission_rejected_total",
		Help: "ShouldRateLimit calls refused over MAX_CONCURRENT_REQUESTS, as envoyproxy/ratelimit counts them.",
	})
	r.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratelimit_service_request_admission_in_flight",
		Help: "ShouldRateLimit calls admitted under MAX_CONCURRENT_REQUESTS and not yet done, as envoyproxy/ratelimit counts them.",
	})
	return r, append(cs, errs, r.loadSuccess, r.loadError, calls, callTime, r.admitted, r.rejected, r.inFlight)
}

// counters resolves the counters of the reference's stats for stats key
// key; a stat no rule maps is nil.
func (r *refMetrics) counters(key string) (c [numStats]prometheus.Counter) {
	for s := range c {
		metric, labels, ok := mapStat(key, s)
		switch {
		case !ok:
		case len(labels) == 2:
			c[s] = r.short[metric].WithLabelValues(labels...)
		default:
			c[s] = r.long[metric].WithLabelValues(labels...)
		}
	}
	return c
}

// appendStatsKey appends the reference's stats key of d's limit, less the
// domain and its dot: with detailed_metric, every entry's key and value
// (for a share_threshold wildcard, its pattern); with value_to_metric, the
// Value the server built; else the limit's Path (Rule, for an override).
func appendStatsKey(dst []byte, d *envoyrls.Decision) []byte {
	l := d.Limit
	switch {
	case l.DetailedMetric:
		// The reference writes "key_value" for every entry, unless some
		// entry landed on a share_threshold wildcard: then the pattern for
		// those, and no "_" for an empty value.
		share := false
		for i, e := range d.Entries {
			share = share || l.KeyValue(i, e.Value) != e.Value
		}
		for i, e := range d.Entries {
			if i > 0 {
				dst = append(dst, '.')
			}
			dst = append(dst, e.Key...)
			if v := l.KeyValue(i, e.Value); !share || v != "" {
				dst = append(dst, '_')
				dst = append(dst, v...)
			}
		}
		return dst
	case l.ValueToMetric && d.Value != "":
		return append(dst, d.Value...)
	case l.Path != "":
		return append(dst, l.Path...)
	}
	return append(dst, l.Rule...)
}

// add counts d's hits on the reference's counters c as its limiter does:
// every hit in total_hits; an allowed request's hits in within_limit, and
// those past the near-limit threshold also in near_limit; a denied
// request's hits past the limit in over_limit and the ones between the
// threshold and the limit in near_limit; in shadow mode, the hits past the
// limit in shadow_mode too. A failed store call counts in total_hits
// alone, since the reference counts it before asking Redis.
func add(c *[numStats]prometheus.Counter, d *envoyrls.Decision) {
	hits, used, limit, near := d.Hits, d.Used, d.Limit.Capacity(), d.NearLimit
	after := used + hits
	counts := [numStats]uint64{statTotalHits: hits}
	switch d.Outcome {
	case envoyrls.OutcomeOK, envoyrls.OutcomeNearLimit:
		counts[statWithinLimit] = hits
		counts[statNearLimit] = sub(after, max(near, used))
	case envoyrls.OutcomeOverLimit, envoyrls.OutcomeShadowOverLimit:
		if used >= limit {
			counts[statOverLimit] = hits
		} else {
			counts[statOverLimit] = sub(after, limit)
			counts[statNearLimit] = sub(limit, max(near, used))
		}
		if d.Outcome == envoyrls.OutcomeShadowOverLimit {
			counts[statShadowMode] = counts[statOverLimit]
		}
	}
	for s, n := range counts {
		if n > 0 && c[s] != nil {
			c[s].Add(float64(n))
		}
	}
}

// sub is a-b, or 0 when b >= a.
func sub(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}
