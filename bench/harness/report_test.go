package main

import (
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	f := func(x float64) *float64 { return &x }
	load := func(dps, p99 float64) *result.Load {
		return &result.Load{Calls: uint64(dps), DecisionsPerS: dps, P50Us: p99 / 4, P99Us: p99, P999Us: p99 * 2}
	}
	noop, _ := scenarioByName("noop")
	a, _ := scenarioByName("a")
	r := &report{
		Scenarios: []scenario{noop, a},
		Options:   map[string]any{"runs": 3},
		Runs: []runResult{
			{Scenario: "noop", Run: 1, Load: load(40000, 1000), ServerCPUUsPerDecision: f(20)},
			{Scenario: "a", Run: 1, Load: load(10000, 4000), ServerCPUUsPerDecision: f(50),
				RoundTripsPerDecision: f(1), RedisCommands: map[string]uint64{"evalsha": 10000, "pexpire": 100}},
			{Scenario: "noop", Run: 2, Load: load(30000, 3000), ServerCPUUsPerDecision: f(24)},
			{Scenario: "a", Run: 2, Error: "loadgen exited early"},
			{Scenario: "noop", Run: 3, Load: load(50000, 2000), ServerCPUUsPerDecision: f(22)},
			{Scenario: "a", Run: 3, Load: load(20000, 6000), ServerCPUUsPerDecision: f(70),
				RedisCommands: map[string]uint64{"evalsha": 20000}},
		},
	}
	r.summarize()
	if len(r.Summary) != 2 {
		t.Fatalf("summarize() gave %d scenarios, want 2", len(r.Summary))
	}
	tests := []struct {
		name string
		got  *float64
		want float64
	}{
		{"noop decisions", r.Summary[0].Decisions, 40000},
		{"noop p99", r.Summary[0].P99Us, 2000},
		{"noop server cpu", r.Summary[0].ServerCPU, 22},
		{"a decisions, failed run left out", r.Summary[1].Decisions, 15000},
		{"a p99", r.Summary[1].P99Us, 5000},
		{"a server cpu", r.Summary[1].ServerCPU, 60},
		{"a round trips, one run without", r.Summary[1].RoundTrips, 1},
		{"a decisions min", r.Summary[1].DecMin, 10000},
	}
	for _, tt := range tests {
		if tt.got == nil || *tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, fmtOpt(tt.got, 2), tt.want)
		}
	}
	if r.Summary[1].Failed != 1 || r.Summary[1].Runs != 3 {
		t.Errorf("a failed/runs = %d/%d, want 1/3", r.Summary[1].Failed, r.Summary[1].Runs)
	}
	if r.Summary[0].RedisCPU != nil {
		t.Errorf("noop Redis CPU = %v, want nil (not measured)", *r.Summary[0].RedisCPU)
	}
	// pexpire ran in one of the two good runs: 0.01 and 0 per decision, median 0.005.
	if got := r.Summary[1].ByCommand; got["evalsha"] != 1 || got["pexpire"] != 0.005 {
		t.Errorf("a by command = %v, want evalsha 1, pexpire 0.005", got)
	}

	table := r.table()
	for _, want := range []string{"| noop server (ceiling) | 40000 | 1.00× |", "| 15000 | 0.38× |", "| 2.50× |", "(1 of 3 runs failed)", "| n/a |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table() lacks %q:\n%s", want, table)
		}
	}
}

// TestSpliceGenerated: -publish rewrites the generated part and keeps the
// hand-written text after it; a page without markers is replaced whole.
func TestSpliceGenerated(t *testing.T) {
	tests := []struct {
		name, old, gen, want string
	}{
		{"new page", "", "# B\n", generatedStart + "# B\n" + generatedEnd},
		{"no markers", "# Old\ntext\n", "# B", generatedStart + "# B\n" + generatedEnd},
		{"keeps the narrative", generatedStart + "# Old\n" + generatedEnd + "\n## Reading\nkept\n", "# New\n",
			generatedStart + "# New\n" + generatedEnd + "\n## Reading\nkept\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := spliceGenerated(tt.old, tt.gen); got != tt.want {
				t.Errorf("spliceGenerated(%q, %q) = %q, want %q", tt.old, tt.gen, got, tt.want)
			}
		})
	}
}
