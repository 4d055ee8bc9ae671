// Package result holds the JSON the benchmark programs pass each other: the load generator's -json run, which
// the harness reads, and the harness's per-scenario summary in results.json, which the capacity model reads.
package result

import "github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/hist"

// Load is one load-generator run. Latencies are in microseconds, rates per second of the measured interval
// (warm-up excluded). A call counts when it started inside the measured interval and finished before its end.
type Load struct {
	Addr        string  `json:"addr"`
	Domain      string  `json:"domain"`
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`
	Conns       int     `json:"conns"`
	Keys        int     `json:"keys"`
	WarmupS     float64 `json:"warmup_s"`
	MeasuredS   float64 `json:"measured_s"` // actual length of the measured interval

	Calls      uint64 `json:"calls"` // answered without error
	Errors     uint64 `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	OK         uint64 `json:"ok"`
	OverLimit  uint64 `json:"over_limit"`
	Unknown    uint64 `json:"unknown"` // overall code UNKNOWN or any other value

	DecisionsPerS   float64 `json:"decisions_per_s"`
	DescriptorsPerS float64 `json:"descriptors_per_s"`
	P50Us           float64 `json:"p50_us"`
	P99Us           float64 `json:"p99_us"`
	P999Us          float64 `json:"p999_us"`
	MaxUs           float64 `json:"max_us"`
	MeanUs          float64 `json:"mean_us"`

	// ChildCPUS is the CPU time, user plus system, in seconds, of the program that sent the measured
	// interval's calls when it is not the generator itself (ghz, with -engine ghz), from its start-up to the
	// end of its report: the generator's own CPU does not include it. Zero when the generator sent them.
	ChildCPUS float64 `json:"child_cpu_s,omitempty"`

	// RLQS is set by bench/rlqsload, whose calls are usage reports.
	RLQS *RLQS `json:"rlqs,omitempty"`
}

// Finish sets the rates from Calls and MeasuredS, and the latencies from h (nanoseconds per answered call).
func (l *Load) Finish(h *hist.Histogram, descriptors int) {
	l.DecisionsPerS = float64(l.Calls) / l.MeasuredS
	l.DescriptorsPerS = l.DecisionsPerS * float64(descriptors)
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	l.P50Us, l.P99Us, l.P999Us, l.MaxUs = us(h.Quantile(0.50)), us(h.Quantile(0.99)), us(h.Quantile(0.999)), us(h.Max())
	if h.Count() > 0 {
		l.MeanUs = h.Mean() / 1e3
	}
}
