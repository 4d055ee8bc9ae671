package main

import (
	"cmp"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RLQS (Envoy's Rate Limit Quota Service) costs the sidecar per bucket usage in a report, not per request: an
// Envoy decides requests itself and reports every bucket it holds every interval. So its costs are the
// harness's scenario rlqs per usage, and what they cost per edge request depends on how many requests a usage
// covers: requests per usage = rate × interval / (Envoys × buckets per Envoy), with every Envoy holding the same
// buckets (the worst case: each reports them all).

// usageCosts are one bucket usage's costs, medians of the harness's scenario rlqs.
type usageCosts struct {
	sidecarUs, redisUs, roundTrips, redisBytes float64
	usagesPerReport                            float64 // the run's buckets per report, for the label
}

// measuredRLQS is what docs/capacity.md quotes for scenario rlqs (`make rlqs-bench PUBLISH=1` of 2026-11-26
// 22:05 UTC: medians of 3 runs of 60 s, 40 Envoys × 500 buckets at 5 s reports, the Redis ledger; round trips
// are its scripts, one per usage, and the charges' batch), and measuredRLQSA scenario a's cost per decision in
// the same run, on the same machine.
var (
	measuredRLQS  = usageCosts{sidecarUs: 59.3, redisUs: 42.5, roundTrips: 1.0, redisBytes: 528, usagesPerReport: 500}
	measuredRLQSA = costs{name: "a", sidecarUs: 38.4, redisUs: 8.4, roundTrips: 0.08, redisBytes: 88}
)

// rlqsInputs are RLQS's usage costs and ShouldRateLimit's cost per decision (scenario a) from one run, and
// that run when it was read from a file.
type rlqsInputs struct {
	usage usageCosts
	a     costs
	run   *harnessRun
}

// rlqsInputs reads -rlqs-results, else takes scenario rlqs from -results's run h, else the measured figures;
// nil when none has them.
func (o options) rlqsInputs(h *harnessRun) (*rlqsInputs, error) {
	if o.rlqsResults != "" {
		var err error
		if h, err = readHarness(o.rlqsResults); err != nil {
			return nil, err
		}
	}
	if h == nil {
		if measuredRLQS.sidecarUs == 0 {
			return nil, nil
		}
		return &rlqsInputs{usage: measuredRLQS, a: measuredRLQSA}, nil
	}
	u, ok := h.rlqsUsageCosts()
	if !ok {
		if o.rlqsResults != "" {
			return nil, fmt.Errorf("%s: no scenario rlqs with server and Redis CPU per usage", o.rlqsResults)
		}
		return nil, nil
	}
	cs := h.costs()
	i := slices.IndexFunc(cs, func(c costs) bool { return c.name == "a" })
	if i < 0 {
		return nil, fmt.Errorf("%s: scenario rlqs without scenario a in the same run", cmp.Or(o.rlqsResults, o.results))
	}
	return &rlqsInputs{usage: u, a: cs[i], run: h}, nil
}

// section renders docs/capacity.md's RLQS part: both protocols sized at the workload's rate from the same run,
// the requests governed per core, and the run's inputs.
func (in *rlqsInputs) section(w workload, kl keyLoad, o options) string {
	var sb strings.Builder
	sb.WriteString(table([]costs{in.a}, &in.usage, w, kl, o))
	sb.WriteString("\n")
	sb.WriteString(governedTable(in.a, in.usage, o.rlqs, w.rate, 100))
	if in.run != nil {
		sb.WriteString("\nInputs, from one harness run:\n\n")
		sb.WriteString(in.run.inputsTable())
		sb.WriteString(in.run.rlqsNote())
	}
	return sb.String()
}

// rlqsNote renders scenario rlqs's per-usage medians and over-admission: its row above is per report.
func (h *harnessRun) rlqsNote() string {
	for _, s := range h.Summary {
		q := s.RLQS
		if q == nil {
			continue
		}
		f := func(p *float64, prec int) string {
			if p == nil {
				return "n/a"
			}
			return strconv.FormatFloat(*p, 'f', prec, 64)
		}
		ratio := func(p *float64, add float64) string {
			if p == nil {
				return "n/a"
			}
			return strconv.FormatFloat(*p+add, 'f', 3, 64)
		}
		return fmt.Sprintf("\nScenario rlqs's row is per report (its decisions/s are reports/s), measured over -rlqs-duration "+
			"after two report intervals of warm-up: %d simulated Envoys × %d buckets reporting every %gs, %s usages/s. Per bucket usage: sidecar CPU %s µs, Redis CPU %s µs, %s Redis commands. "+
			"Over %d rule windows the fleet admitted from %s to %s of the limit per window (medians over runs of each "+
			"run's lowest and highest; highest of all %s).\n",
			q.Streams, q.Buckets, q.IntervalS, f(q.UsagesPerS, 0), f(q.ServerCPUUsage, 1), f(q.RedisCPUUsage, 1),
			f(q.RedisCmdsUsage, 2), q.Windows, ratio(q.FillMin, 0), ratio(q.EpsilonMax, 1), ratio(q.EpsilonWorst, 1))
	}
	return ""
}

// rlqsFleet is the Envoy fleet the RLQS row assumes.
type rlqsFleet struct {
	envoys   int
	buckets  int // bucket ids each Envoy holds, the same ones in every Envoy
	interval time.Duration
}

func (f *rlqsFleet) flags(fs *flag.FlagSet) {
	fs.IntVar(&f.envoys, "rlqs-envoys", 100, "RLQS row: Envoys reporting to the sidecars")
	fs.IntVar(&f.buckets, "rlqs-buckets", 1000, "RLQS row: bucket ids each Envoy holds and reports (the same in every Envoy)")
	fs.DurationVar(&f.interval, "rlqs-interval", 5*time.Second, "RLQS row: report interval (Envoy 1.40: 5s)")
}

func (f rlqsFleet) valid() bool { return f.envoys > 0 && f.buckets > 0 && f.interval > 0 }

// usagesPerS is the usages the fleet reports per second, whatever its request rate.
func (f rlqsFleet) usagesPerS() float64 {
	return float64(f.envoys) * float64(f.buckets) / f.interval.Seconds()
}

// requestsPerUsage is how many edge requests a usage covers at rate requests/s.
func (f rlqsFleet) requestsPerUsage(rate float64) float64 { return rate / f.usagesPerS() }

// costs returns u as costs per governed request at rate: a usage's costs spread over the requests it covers.
func (f rlqsFleet) costs(u usageCosts, rate float64) costs {
	per := f.requestsPerUsage(rate)
	return costs{name: "rlqs", sidecarUs: u.sidecarUs / per, redisUs: u.redisUs / per, roundTrips: u.roundTrips / per,
		redisBytes: u.redisBytes / per}
}

// keyLoad is the RLQS state's spread over the slots: one key per bucket, each reported by every Envoy, so
// evenly loaded whatever the requests' skew (a bucket's Redis work follows its reports, not its requests).
func (f rlqsFleet) keyLoad() keyLoad {
	return newKeyLoad(workload{keys: f.buckets, name: func(r int) string { return "rl|user=b" + strconv.Itoa(r) }})
}

// label describes the RLQS row.
func (f rlqsFleet) label(rate float64) string {
	return fmt.Sprintf("RLQS, %d Envoys × %d buckets at %v reports (%.3g requests per usage)", f.envoys, f.buckets,
		f.interval, f.requestsPerUsage(rate))
}

// rlqsUsageCosts returns the usage costs of the harness run's scenario rlqs, if it has one.
func (h *harnessRun) rlqsUsageCosts() (usageCosts, bool) {
	for _, s := range h.Summary {
		q := s.RLQS
		if q == nil || q.ServerCPUUsage == nil || q.RedisCPUUsage == nil {
			continue
		}
		u := usageCosts{sidecarUs: *q.ServerCPUUsage, redisUs: *q.RedisCPUUsage, usagesPerReport: float64(q.Buckets)}
		if q.RoundTripsUsage != nil {
			u.roundTrips = *q.RoundTripsUsage
		}
		// The sidecar counts the round trips of its counter store only; the ledger's are one script call each.
		if n := s.ByCommand["evalsha"]; q.Buckets > 0 && n/float64(q.Buckets) > u.roundTrips {
			u.roundTrips = n / float64(q.Buckets)
		}
		if s.RedisBytes != nil && q.Buckets > 0 {
			u.redisBytes = *s.RedisBytes / float64(q.Buckets)
		}
		return u, true
	}
	return usageCosts{}, false
}

// governedTable compares edge requests governed per sidecar core: ShouldRateLimit's decisions per core (cost
// set a) against RLQS's usages per core times the requests each covers, at a few requests per usage and at the
// fleet's, with the requests per usage RLQS needs for target times as many.
func governedTable(a costs, u usageCosts, f rlqsFleet, rate, target float64) string {
	var sb strings.Builder
	srl := 1e6 / a.sidecarUs
	fmt.Fprintf(&sb, "ShouldRateLimit (a): %.1f µs of sidecar CPU per decision, %.0f decisions per core-second. "+
		"RLQS: %.1f µs per bucket usage (%.0f buckets per report), %.0f usages per core-second.\n\n",
		a.sidecarUs, srl, u.sidecarUs, u.usagesPerReport, 1e6/u.sidecarUs)
	fmt.Fprintln(&sb, "| requests per usage (per bucket, Envoy and report interval) | edge requests governed per sidecar core-second | vs ShouldRateLimit |")
	fmt.Fprintln(&sb, "|---|--:|--:|")
	row := func(label string, per float64) {
		g := 1e6 / u.sidecarUs * per
		fmt.Fprintf(&sb, "| %s | %.3g | %.1f× |\n", label, g, g/srl)
	}
	for _, per := range []float64{1, 10, 100, 1000} {
		row(strconv.FormatFloat(per, 'f', -1, 64), per)
	}
	row(fmt.Sprintf("%.3g (%s at %.0f requests/s)", f.requestsPerUsage(rate), f.shortLabel(), rate), f.requestsPerUsage(rate))
	need := target * u.sidecarUs / a.sidecarUs
	fmt.Fprintf(&sb, "\n%.0f× as many requests per core as ShouldRateLimit needs at least %.1f requests per usage: %.2g requests/s "+
		"per bucket and Envoy at %v reports.\n", target, need, need/f.interval.Seconds(), f.interval)
	return sb.String()
}

func (f rlqsFleet) shortLabel() string {
	return fmt.Sprintf("%d Envoys × %d buckets, %v", f.envoys, f.buckets, f.interval)
}
