package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

// harnessRun is what the model reads of a harness results.json: its command, the summary and every run's
// figures, for the ranges the inputs table shows.
type harnessRun struct {
	Command string `json:"command"`
	Options struct {
		Runs     int    `json:"runs"`
		Duration string `json:"duration"`
		Warmup   string `json:"warmup"`
	} `json:"options"`
	Summary []struct {
		Name  string `json:"name"`
		Label string `json:"label"`
		result.Summary
	} `json:"summary"`
	Runs []struct {
		Scenario  string   `json:"scenario"`
		ServerCPU *float64 `json:"server_cpu_us_per_decision"`
		RedisCPU  *float64 `json:"redis_cpu_us_per_decision"`
	} `json:"runs"`
}

func readHarness(path string) (*harnessRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h harnessRun
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &h, nil
}

// costs returns one cost set per scenario with server and Redis figures per decision (scenarios without them,
// such as the no-op's, and RLQS's, which are per report, are left out).
func (h *harnessRun) costs() []costs {
	var cs []costs
	for _, s := range h.Summary {
		if s.ServerCPU == nil || s.RedisCPU == nil || *s.RedisCPU <= 0 || s.RLQS != nil {
			continue // RLQS's figures are per report: see rlqsUsageCosts
		}
		c := costs{name: s.Name, sidecarUs: *s.ServerCPU, redisUs: *s.RedisCPU, roundTrips: 1}
		if s.RoundTrips != nil { // envoyproxy/ratelimit exports none: one pipeline per request
			c.roundTrips = *s.RoundTrips
		}
		if s.RedisBytes != nil {
			c.redisBytes = *s.RedisBytes
		}
		cs = append(cs, c)
	}
	return cs
}

// bytesPerKey returns scenario name's Redis bytes per live counter, 0 when the run has none.
func (h *harnessRun) bytesPerKey(name string) float64 {
	for _, s := range h.Summary {
		if s.Name == name && s.KeySpace != nil && s.KeySpace.BytesPerKey != nil {
			return *s.KeySpace.BytesPerKey
		}
	}
	return 0
}

// inputsTable renders the harness figures the model takes, per scenario, with the range of the runs.
func (h *harnessRun) inputsTable() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "```\n%s\n```\n\n", h.Command)
	fmt.Fprintln(&sb, "| scenario | decisions/s | sidecar CPU µs | Redis CPU µs | Redis commands | round trips | Redis bytes | server I/O bytes |")
	fmt.Fprintln(&sb, "|---|--:|--:|--:|--:|--:|--:|--:|")
	f := func(p *float64, prec int) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'f', prec, 64)
	}
	for _, s := range h.Summary {
		if s.Decisions == nil {
			continue
		}
		var srv, rds []float64
		for _, r := range h.Runs {
			if r.Scenario != s.Name {
				continue
			}
			if r.ServerCPU != nil {
				srv = append(srv, *r.ServerCPU)
			}
			if r.RedisCPU != nil {
				rds = append(rds, *r.RedisCPU)
			}
		}
		withRange := func(p *float64, xs []float64) string {
			if p == nil {
				return ""
			}
			if len(xs) < 2 {
				return f(p, 1)
			}
			return fmt.Sprintf("%.1f (%.1f–%.1f)", *p, slices.Min(xs), slices.Max(xs))
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Label, f(s.Decisions, 0),
			withRange(s.ServerCPU, srv), withRange(s.RedisCPU, rds), f(s.RedisCmds, 2), f(s.RoundTrips, 2),
			f(s.RedisBytes, 0), f(s.ServerIO, 0))
	}
	fmt.Fprintf(&sb, "\nMedians of %d run(s) of %s after %s of warm-up; ranges are the lowest and highest run.\n",
		h.Options.Runs, h.Options.Duration, h.Options.Warmup)
	return sb.String()
}

// ceiling is BenchmarkShardCeiling's output: per sub-benchmark (fixed, sliding, hotkeys), each metric's values
// over the -count runs.
type ceiling map[string]map[string][]float64

// readCeiling parses `go test -bench ShardCeiling` output.
func readCeiling(path string) (ceiling, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := ceiling{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		name, ok := strings.CutPrefix(fields[0], "BenchmarkShardCeiling/")
		if !ok {
			continue
		}
		if i := strings.LastIndexByte(name, '-'); i > 0 { // the -GOMAXPROCS suffix
			name = name[:i]
		}
		if c[name] == nil {
			c[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fields); i += 2 { // after the name and the iterations: value unit pairs
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			c[name][fields[i+1]] = append(c[name][fields[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(c) == 0 {
		return nil, fmt.Errorf("%s: no BenchmarkShardCeiling lines", path)
	}
	return c, nil
}

// median returns the median of sub-benchmark name's metric, NaN when absent.
func (c ceiling) median(name, metric string) float64 {
	xs := slices.Clone(c[name][metric])
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// loadCosts returns cost set a-load: a's costs with Redis's cost per decision and round trips at high load.
func (c ceiling) loadCosts(a costs) (costs, bool) {
	us, rt := c.median("fixed", "redis-µs/decision"), c.median("fixed", "round-trips/decision")
	if math.IsNaN(us) || us <= 0 {
		return costs{}, false
	}
	a.name, a.redisUs = "a-load", us
	if !math.IsNaN(rt) {
		a.roundTrips = rt
	}
	return a, true
}

// table renders the ceiling's medians with their ranges.
func (c ceiling) table() string {
	var sb strings.Builder
	fmt.Fprintln(&sb, "| requests | Redis µs per decision | Redis core busy | decisions/s at one full core | round trips per decision |")
	fmt.Fprintln(&sb, "|---|--:|--:|--:|--:|")
	rows := []struct{ name, label string }{
		{"fixed", "fixed window, 1,000 keys"}, {"sliding", "sliding window, 1,000 keys"}, {"hotkeys", "half on 10 keys"},
	}
	for _, r := range rows {
		m := c[r.name]
		if m == nil {
			continue
		}
		us := m["redis-µs/decision"]
		busy := m["redis-core"]
		if len(us) == 0 || len(busy) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "| %s | %.2f (%.2f–%.2f) | %.2f–%.2f | %.0f | %.3f |\n", r.label,
			c.median(r.name, "redis-µs/decision"), slices.Min(us), slices.Max(us), slices.Min(busy), slices.Max(busy),
			1e6/c.median(r.name, "redis-µs/decision"), c.median(r.name, "round-trips/decision"))
	}
	return sb.String()
}
