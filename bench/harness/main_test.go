package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
)

// TestBenchRulesParse: the embedded rules are what every sidecar scenario
// serves (and what BenchmarkShouldRateLimit reads), so they must load.
func TestBenchRulesParse(t *testing.T) {
	r, err := envoyrls.ParseRules([]string{"bench.yaml"}, map[string][]byte{"bench.yaml": []byte(benchRules)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Domain("bench") == nil {
		t.Fatal("bench.yaml does not define domain bench")
	}
}

// TestStandInRun runs the harness end to end with the no-op server standing
// in for the sidecar and for envoyproxy/ratelimit: every scenario must be
// loaded and measured, and neither Redis nor a go install (the network) may
// be needed, so the harness itself is tested on any machine.
func TestStandInRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the harness's binaries")
	}
	out := t.TempDir()
	var stdout, stderr strings.Builder
	err := run(t.Context(), []string{"-stand-in", "-scenarios", "noop,a,ref", "-runs", "1", "-duration", "1s",
		"-warmup", "0s", "-c", "4", "-redis-server", "/nonexistent/redis-server", "-out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "go install") {
		t.Errorf("a stand-in run installed something:\n%s", stderr.String())
	}
	var rep report
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.StandIn || len(rep.Runs) != 3 {
		t.Fatalf("stand_in %v, %d runs; want true, 3", rep.StandIn, len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Error != "" || r.Load == nil || r.Load.Calls == 0 || r.ServerCPUUsPerDecision == nil {
			t.Errorf("scenario %s: error %q, load %+v, server CPU %v", r.Scenario, r.Error, r.Load, r.ServerCPUUsPerDecision)
		}
		if !strings.Contains(r.ServerCmd, "noop") {
			t.Errorf("scenario %s was served by %q, want the no-op server", r.Scenario, r.ServerCmd)
		}
	}
	if !strings.Contains(stdout.String(), "(ref) envoyproxy/ratelimit") {
		t.Errorf("the table has no ref row:\n%s", stdout.String())
	}

	// -replot rewrites the table and chart from results.json alone.
	for _, f := range []string{"table.md", "benchmarks.png"} {
		if err := os.Remove(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(t.Context(), []string{"-replot", "-out", out}, io.Discard, io.Discard); err != nil {
		t.Fatalf("replot: %v", err)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil || !strings.Contains(string(table), "(ref) envoyproxy/ratelimit") || !strings.Contains(string(table), "Medians of 1 run(s)") {
		t.Errorf("replot wrote table.md %q (%v)", table, err)
	}
	if _, err := os.Stat(filepath.Join(out, "benchmarks.png")); err != nil {
		t.Errorf("replot wrote no chart: %v", err)
	}
}

// TestChartNames: every scenario has a short name under its bars.
func TestChartNames(t *testing.T) {
	for _, sc := range allScenarios {
		if chartNames[sc.Name] == "" {
			t.Errorf("scenario %s has no chart name", sc.Name)
		}
	}
}

// TestWholeTicks: three to six labelled round values inside the range.
func TestWholeTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 25000}, {0, 42000}, {0, 7.5}, {0, 1}, {0, 130000}} {
		ticks := wholeTicks{}.Ticks(r[0], r[1])
		if len(ticks) < 3 || len(ticks) > 7 {
			t.Errorf("%v: %d ticks %v", r, len(ticks), ticks)
		}
		for _, tk := range ticks {
			if tk.Value < r[0] || tk.Value > r[1] || tk.Label == "" {
				t.Errorf("%v: tick %+v", r, tk)
			}
		}
	}
}
