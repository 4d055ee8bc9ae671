package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// TestBenchRulesParse: the embedded rules are what every sidecar scenario
// serves (and what BenchmarkShouldRateLimit reads), so they must load.
func TestBenchRulesParse(t *testing.T) {
	r, err := rules.Parse([]string{"bench.yaml"}, map[string][]byte{"bench.yaml": []byte(benchRules)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Domain("bench") == nil {
		t.Fatal("bench.yaml does not define domain bench")
	}
}

// TestAlgorithmRulesParse: the rules of a scenario with an algorithm load, and every limit that scenario (a)'s
// request hits uses that algorithm.
func TestAlgorithmRulesParse(t *testing.T) {
	for _, sc := range allScenarios {
		if sc.Algorithm == "" {
			continue
		}
		r, err := rules.Parse([]string{"bench.yaml"}, map[string][]byte{"bench.yaml": algorithmRules([]byte(benchRules), sc.Algorithm)})
		if err != nil {
			t.Errorf("scenario %s: %v", sc.Name, err)
			continue
		}
		d := r.Domain("bench")
		if d == nil {
			t.Fatalf("scenario %s: no domain bench", sc.Name)
		}
		limits := d.Match([]*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}})
		if len(limits) == 0 {
			t.Errorf("scenario %s: (api_key, k1) hits no limit", sc.Name)
		}
		for _, l := range limits {
			if l.Algorithm.String() != sc.Algorithm || l.RequestsPerUnit < 1000 {
				t.Errorf("scenario %s: (api_key, k1) hits a %s limit of %d, want %s, at least 1000", sc.Name, l.Algorithm, l.RequestsPerUnit, sc.Algorithm)
			}
		}
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
	err := run(t.Context(), []string{"-stand-in", "-scenarios", "noop,a,h,cl,ref", "-runs", "1", "-duration", "1s",
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
	if !rep.StandIn || len(rep.Runs) != 5 {
		t.Fatalf("stand_in %v, %d runs; want true, 5", rep.StandIn, len(rep.Runs))
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
	// The page is the measuring engine's, whatever -engine says.
	docs := t.TempDir()
	if err := run(t.Context(), []string{"-replot", "-publish", "-engine", "ghz", "-out", out, "-docs", docs}, io.Discard, io.Discard); err != nil {
		t.Fatalf("replot -publish: %v", err)
	}
	if pages, _ := filepath.Glob(filepath.Join(docs, "*.md")); len(pages) != 1 || filepath.Base(pages[0]) != "benchmarks.md" {
		t.Errorf("replot of a loadgen run published %v, want benchmarks.md", pages)
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

// TestWholeTicks: round, distinct, whole-number labels inside the range.
func TestWholeTicks(t *testing.T) {
	for _, tt := range []struct {
		min, max float64
		want     []float64
	}{
		{0, 25000, []float64{0, 5000, 10000, 15000, 20000, 25000}},
		{0, 30000, []float64{0, 10000, 20000, 30000}},
		{0, 54000, []float64{0, 20000, 40000}},
		{0, 42050, []float64{0, 10000, 20000, 30000, 40000}},
		{0, 3, []float64{0, 1, 2, 3}},
		{0, 1, []float64{0, 1}},
		{-1, 1, []float64{-1, 0, 1}},
	} {
		var got []float64
		labels := map[string]bool{}
		for _, tk := range (wholeTicks{}).Ticks(tt.min, tt.max) {
			got = append(got, tk.Value)
			if tk.Label != strconv.FormatFloat(tk.Value, 'f', -1, 64) || labels[tk.Label] {
				t.Errorf("%v..%v: tick %v labelled %q", tt.min, tt.max, tk.Value, tk.Label)
			}
			labels[tk.Label] = true
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%v..%v: ticks %v, want %v", tt.min, tt.max, got, tt.want)
		}
	}
}
