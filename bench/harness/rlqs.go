package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

// rlqsLoad is the Load of scenario rlqs: bench/rlqsload's fleet of simulated Envoys on the sidecar's Rate Limit
// Quota Service, in place of bench/loadgen's ShouldRateLimit calls. Its "decisions" are usage reports.
const rlqsLoad = "rlqs"

// rlqsOptions shape scenario rlqs's fleet and the rule its buckets match.
type rlqsOptions struct {
	streams  int
	buckets  int
	interval time.Duration
	limit    uint64
	window   time.Duration
	skew     float64
	duration time.Duration // 0: the harness's -duration
	tick     time.Duration
}

func (r *rlqsOptions) flags(fs *flag.FlagSet) {
	fs.IntVar(&r.streams, "rlqs-streams", 40, "scenario rlqs: simulated Envoys, one connection and stream each")
	fs.IntVar(&r.buckets, "rlqs-buckets", 500, "scenario rlqs: bucket ids each Envoy reports")
	fs.DurationVar(&r.interval, "rlqs-interval", 5*time.Second, "scenario rlqs: report interval (Envoy 1.40's is 5s; shorter compresses time)")
	fs.Uint64Var(&r.limit, "rlqs-limit", 2000, "scenario rlqs: the rule's requests per -rlqs-window for each bucket; the fleet offers three times as many")
	fs.DurationVar(&r.window, "rlqs-window", 20*time.Second, "scenario rlqs: the rule's window, whole seconds")
	fs.DurationVar(&r.duration, "rlqs-duration", 0, "scenario rlqs: its measured interval (0: -duration); several rule windows long, for the over-admission")
	fs.DurationVar(&r.tick, "rlqs-tick", 250*time.Millisecond, "scenario rlqs: how often each simulated Envoy decides the requests that arrived since the last tick")
	fs.Float64Var(&r.skew, "rlqs-skew", 1, "scenario rlqs: Zipf exponent of the Envoys' shares of the demand (0: even)")
}

func (r *rlqsOptions) check() error {
	if r.streams < 1 || r.buckets < 1 || r.limit < 1 || r.interval <= 0 || r.tick <= 0 || r.skew < 0 || r.duration < 0 {
		return errors.New("-rlqs-streams, -rlqs-buckets, -rlqs-limit, -rlqs-interval and -rlqs-tick must be positive, -rlqs-skew and -rlqs-duration not negative")
	}
	if r.window < time.Second || r.window%time.Second != 0 {
		return fmt.Errorf("-rlqs-window %v: want whole seconds", r.window)
	}
	return nil
}

// args returns bench/rlqsload's arguments against t. The warm-up is the harness's or two report intervals,
// whichever is longer, so that every Envoy has reported and holds its first assignment before the measured
// interval starts.
func (r rlqsOptions) args(o options, t target) []string {
	warmup := max(o.warmup, 2*r.interval)
	duration := o.duration
	if r.duration > 0 {
		duration = r.duration
	}
	return []string{"-addr", t.addr, "-domain", t.domain, "-key", rlqsKey, "-streams", strconv.Itoa(r.streams),
		"-buckets", strconv.Itoa(r.buckets), "-interval", r.interval.String(), "-limit", strconv.FormatUint(r.limit, 10),
		"-window", r.window.String(), "-skew", strconv.FormatFloat(r.skew, 'g', -1, 64), "-tick", min(r.tick, r.interval).String(),
		"-duration", duration.String(), "-warmup", warmup.String(), "-json", "-marks"}
}

// rlqsKey is the key of scenario rlqs's bucket ids, {user: b0} to {user: b<n-1>}, as the example Envoy config
// builds them from a header.
const rlqsKey = "user"

// rule is the rules file entry every bucket of scenario rlqs matches: one counter per value of rlqsKey.
func (r rlqsOptions) rule() string {
	return fmt.Sprintf("  # Scenario rlqs: every bucket {%s: b<j>} is divided among the simulated Envoys.\n"+
		"  - key: %s\n    rate_limit: {unit: second, unit_multiplier: %d, requests_per_unit: %d}\n",
		rlqsKey, rlqsKey, int64(r.window/time.Second), r.limit)
}

// rlqsRules returns the rules file of scenario rlqs: the bench rules and the rule of its buckets (written
// once). envoyproxy/ratelimit, which reads the bench rules too, knows no unit_multiplier, hence a file apart.
func (b *bench) rlqsRules() (string, error) {
	path := filepath.Join(b.tmp, "bench-rlqs.yaml")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	rules, err := os.ReadFile(b.rules)
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(rules, b.o.rlqs.rule()...), 0o644)
}

// rlqsRun is one rlqs run's figures per bucket usage (a report carries one per bucket) and the over-admission
// the simulated Envoys measured.
type rlqsRun struct {
	UsagesPerReport      float64  `json:"usages_per_report"`
	ServerCPUUsPerUsage  *float64 `json:"server_cpu_us_per_usage"`
	RedisCPUUsPerUsage   *float64 `json:"redis_cpu_us_per_usage"`
	RedisCmdsPerUsage    *float64 `json:"redis_commands_per_usage"`
	RoundTripsPerUsage   *float64 `json:"round_trips_per_usage"`
	LoadgenCPUUsPerUsage *float64 `json:"loadgen_cpu_us_per_usage"`
	EpsilonMax           float64  `json:"epsilon_max"`
	FillMin              float64  `json:"fill_min"`
	Windows              int      `json:"windows"`
	OfferedPerS          float64  `json:"offered_per_s_per_bucket"`
	AdmittedPerS         float64  `json:"admitted_per_s_per_bucket"`
}

// rlqsFigures derives the per-usage figures from the per-report ones; nil for a run of another load.
func (rr *runResult) rlqsFigures(l *result.Load) *rlqsRun {
	if l.RLQS == nil || l.RLQS.Usages == 0 || l.Calls == 0 {
		return nil
	}
	per := float64(l.RLQS.Usages) / float64(l.Calls)
	perUsage := func(p *float64) *float64 {
		if p == nil {
			return nil
		}
		v := *p / per
		return &v
	}
	q := l.RLQS
	return &rlqsRun{UsagesPerReport: per, ServerCPUUsPerUsage: perUsage(rr.ServerCPUUsPerDecision),
		RedisCPUUsPerUsage: perUsage(rr.RedisCPUUsPerDecision), RedisCmdsPerUsage: perUsage(rr.RedisCmdsPerDecision),
		RoundTripsPerUsage: perUsage(rr.RoundTripsPerDecision), LoadgenCPUUsPerUsage: perUsage(rr.LoadgenCPUUsPerDecision),
		EpsilonMax: q.EpsilonMax, FillMin: q.FillMin, Windows: q.Windows, OfferedPerS: q.OfferedPerS, AdmittedPerS: q.AdmittedPerS}
}

// summarizeRLQS returns the medians of scenario name's rlqs figures, nil when it has none.
func summarizeRLQS(runs []runResult, name string) *result.RLQSSummary {
	var s result.RLQSSummary
	var ups, srv, rcpu, rcmd, rt, eps, fill []float64
	for _, r := range runs {
		if r.Scenario != name || r.Error != "" || r.RLQS == nil || r.Load == nil || r.Load.RLQS == nil {
			continue
		}
		q := r.Load.RLQS
		s.Streams, s.Buckets, s.IntervalS = q.Streams, q.Buckets, q.IntervalS
		s.StoreErrors += r.StoreErrors
		s.Refused += r.RLQSRefused
		ups = append(ups, r.Load.DescriptorsPerS)
		srv = append(srv, val(r.RLQS.ServerCPUUsPerUsage))
		rcpu = append(rcpu, val(r.RLQS.RedisCPUUsPerUsage))
		rcmd = append(rcmd, val(r.RLQS.RedisCmdsPerUsage))
		rt = append(rt, val(r.RLQS.RoundTripsPerUsage))
		if q.Windows > 0 {
			eps = append(eps, q.EpsilonMax)
			fill = append(fill, q.FillMin)
			s.Windows += q.Windows
			if s.EpsilonWorst == nil || q.EpsilonMax > *s.EpsilonWorst {
				s.EpsilonWorst = opt(q.EpsilonMax)
			}
		}
	}
	if len(ups) == 0 {
		return nil
	}
	s.UsagesPerS, s.ServerCPUUsage, s.RedisCPUUsage = opt(median(ups)), opt(median(srv)), opt(median(rcpu))
	s.RedisCmdsUsage, s.RoundTripsUsage = opt(median(rcmd)), opt(median(rt))
	s.EpsilonMax, s.FillMin = opt(median(eps)), opt(median(fill))
	return &s
}

// rlqsNote renders an rlqs scenario's per-usage figures for the table's notes.
func rlqsNote(label string, q *result.RLQSSummary) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d streams × %d buckets reporting every %gs, so its decisions/s are usage reports/s and its per-decision figures per report; "+
		"per bucket usage: %s usages/s, server CPU %s µs, Redis CPU %s µs, Redis commands %s, round trips %s. ",
		label, q.Streams, q.Buckets, q.IntervalS, fmtOpt(q.UsagesPerS, 0), fmtOpt(q.ServerCPUUsage, 2),
		fmtOpt(q.RedisCPUUsage, 2), fmtOpt(q.RedisCmdsUsage, 2), fmtOpt(q.RoundTripsUsage, 3))
	fmt.Fprintf(&sb, "Over %d rule windows, the fleet admitted at most %s of the limit in a window (median over runs; worst %s), at least %s.\n",
		q.Windows, ratioText(q.EpsilonMax, 1), ratioText(q.EpsilonWorst, 1), ratioText(q.FillMin, 0))
	if q.StoreErrors > 0 || q.Refused > 0 {
		fmt.Fprintf(&sb, "**%s: %d failed store calls and %d refused usages in the measured intervals.**\n", label, q.StoreErrors, q.Refused)
	}
	return sb.String()
}

// ratioText renders p + add as a ratio to the limit ("1.043×"), n/a when unmeasured.
func ratioText(p *float64, add float64) string {
	if p == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*p+add, 'f', 3, 64) + "×"
}
