package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// RLQS is a Prometheus rlqs.Observer: what Envoy's rate_limit_quota
// filters decided at the edge, as they report it, and what the server
// assigned. It is safe for concurrent use.
//
// Metric names:
//
//	ratelimit_rlqs_reported_requests_total{domain,rule,decision="allowed|denied"}  counter, Envoy's counts
//	ratelimit_rlqs_assignments_total{domain,kind}   counter; kind allow_all, deny_all, token_bucket, abandon
//	ratelimit_rlqs_refused_total{reason}            counter, usages and streams refused
//	ratelimit_rlqs_streams                          gauge, streams served now
//	ratelimit_rlqs_buckets                          gauge, buckets held by those streams (one per Envoy and bucket)
//
// The rule label is the limit's Rule, as in ratelimit_decisions_total
// (never request values: a bucket's values are often identities), and ""
// for a bucket that matches no limit. A bucket with several limits counts
// under each.
type RLQS struct {
	reported *prometheus.CounterVec
	assigned *prometheus.CounterVec
	refused  *prometheus.CounterVec
	streams  prometheus.Gauge
	buckets  prometheus.Gauge
}

var _ rlqs.Observer = (*RLQS)(nil)

// NewRLQS registers the RLQS collectors on reg and returns them.
func NewRLQS(reg prometheus.Registerer) (*RLQS, error) {
	m := &RLQS{
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_reported_requests_total",
			Help: "Requests Envoy's rate_limit_quota filters report they allowed or denied at the edge, by domain, rule and decision.",
		}, []string{"domain", "rule", "decision"}),
		assigned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_assignments_total",
			Help: "RLQS bucket actions sent, by domain and kind (allow_all, deny_all, token_bucket, abandon).",
		}, []string{"domain", "kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_rlqs_refused_total",
			Help: "RLQS usages and streams refused, by reason; nothing of a refused usage is charged.",
		}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_rlqs_streams",
			Help: "RLQS streams served now: about one per Envoy and domain.",
		}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_rlqs_buckets",
			Help: "Buckets the RLQS streams served now report: the clients among which limits are divided.",
		}),
	}
	for _, c := range []prometheus.Collector{m.reported, m.assigned, m.refused, m.streams, m.buckets} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Usage counts Envoy's reported decisions of one bucket for limit l.
func (m *RLQS) Usage(domain string, l *rules.Limit, allowed, denied uint64) {
	rule := ""
	if l != nil {
		rule = l.Rule
	}
	if allowed > 0 {
		m.reported.WithLabelValues(domain, rule, "allowed").Add(float64(allowed))
	}
	if denied > 0 {
		m.reported.WithLabelValues(domain, rule, "denied").Add(float64(denied))
	}
}

// Assignment counts one bucket action sent.
func (m *RLQS) Assignment(domain string, k rlqs.Kind) {
	m.assigned.WithLabelValues(domain, k.String()).Inc()
}

// Refused counts one refusal.
func (m *RLQS) Refused(r rlqs.Refusal) { m.refused.WithLabelValues(r.String()).Inc() }

// Streams adds delta to the streams served.
func (m *RLQS) Streams(delta int) { m.streams.Add(float64(delta)) }

// Buckets adds delta to the buckets held.
func (m *RLQS) Buckets(delta int) { m.buckets.Add(float64(delta)) }
