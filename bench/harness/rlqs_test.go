package main

import (
	"io"
	"slices"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// TestRLQSRules: scenario rlqs's rules load, and a bucket's one entry hits exactly the limit rlqsload is told
// to measure the over-admission against.
func TestRLQSRules(t *testing.T) {
	for _, ro := range []rlqsOptions{{limit: 2000, window: 20 * time.Second}, {limit: 7, window: 90 * time.Second}} {
		r, err := rules.Parse([]string{"bench.yaml"}, map[string][]byte{"bench.yaml": append([]byte(benchRules), ro.rule()...)})
		if err != nil {
			t.Fatalf("%+v: %v", ro, err)
		}
		limits := r.Domain("bench").Match([]*rlv3.RateLimitDescriptor_Entry{{Key: rlqsKey, Value: "b3"}})
		if len(limits) != 1 || uint64(limits[0].RequestsPerUnit) != ro.limit || limits[0].Size != ro.window {
			t.Errorf("%+v: {%s: b3} hits %+v, want one limit of %d per %v", ro, rlqsKey, limits, ro.limit, ro.window)
		}
	}
}

func TestRLQSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-scenarios", "a,rlqs"}, true},
		{[]string{"-scenarios", "rlqs", "-rlqs-window", "1500ms"}, false},
		{[]string{"-scenarios", "rlqs", "-rlqs-streams", "0"}, false},
		{[]string{"-scenarios", "rlqs", "-rlqs-interval", "250ms", "-rlqs-window", "2s"}, true},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q) = %v, want ok %v", tc.args, err, tc.ok)
		}
	}
	o, err := parseFlags([]string{"-scenarios", "rlqs", "-warmup", "1s", "-duration", "30s", "-rlqs-duration", "90s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	args := o.rlqs.args(o, target{addr: "127.0.0.1:1", domain: "bench"})
	// The warm-up covers two report intervals whatever -warmup says, so every Envoy holds an assignment.
	if i := slices.Index(args, "-warmup"); i < 0 || args[i+1] != "10s" {
		t.Errorf("args %q: want -warmup 10s", args)
	}
	if i := slices.Index(args, "-duration"); i < 0 || args[i+1] != "1m30s" {
		t.Errorf("args %q: want -duration 1m30s (-rlqs-duration)", args)
	}
}

// TestRLQSFigures: per-usage figures are the per-report ones over the usages a report carried, and the
// summary takes medians over the runs and the worst window of all.
func TestRLQSFigures(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	var runs []runResult
	for i, srv := range []float64{400, 200, 300} {
		rr := runResult{Scenario: "rlqs", Run: i + 1, ServerCPUUsPerDecision: f(srv), RedisCmdsPerDecision: f(40),
			Load: &result.Load{Calls: 100, DescriptorsPerS: 20, RLQS: &result.RLQS{Streams: 10, Buckets: 20,
				IntervalS: 5, Usages: 2000, Windows: 5, EpsilonMax: float64(i) / 100, FillMin: 0.9}}}
		rr.RLQS = rr.rlqsFigures(rr.Load)
		runs = append(runs, rr)
	}
	if got := *runs[0].RLQS.ServerCPUUsPerUsage; got != 20 {
		t.Errorf("server µs per usage = %v, want 400/20", got)
	}
	if runs[0].RLQS.RedisCPUUsPerUsage != nil {
		t.Error("Redis CPU per usage from no per-report figure")
	}
	s := summarizeRLQS(runs, "rlqs")
	if s == nil || *s.ServerCPUUsage != 15 || *s.RedisCmdsUsage != 2 || *s.EpsilonMax != 0.01 || *s.EpsilonWorst != 0.02 ||
		s.Windows != 15 || s.Streams != 10 {
		t.Errorf("summary %+v", s)
	}
	if summarizeRLQS(runs, "a") != nil {
		t.Error("a summary for a scenario without runs")
	}
}
