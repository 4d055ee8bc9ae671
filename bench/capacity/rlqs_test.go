package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRLQSFleet works the RLQS row's arithmetic by hand: 100 Envoys × 1,000 buckets every 5 s report 20,000
// usages/s, so at 1M requests/s a usage covers 50 requests and costs per request are a fiftieth of a usage's.
func TestRLQSFleet(t *testing.T) {
	t.Parallel()
	f := rlqsFleet{envoys: 100, buckets: 1000, interval: 5 * time.Second}
	if got := f.usagesPerS(); !near(got, 20000) {
		t.Errorf("usagesPerS = %v, want 20000", got)
	}
	c := f.costs(usageCosts{sidecarUs: 50, redisUs: 20, roundTrips: 0.5, redisBytes: 400}, 1e6)
	if want := (costs{name: "rlqs", sidecarUs: 1, redisUs: 0.4, roundTrips: 0.01, redisBytes: 8}); !near(c.sidecarUs, want.sidecarUs) ||
		!near(c.redisUs, want.redisUs) || !near(c.roundTrips, want.roundTrips) || !near(c.redisBytes, want.redisBytes) {
		t.Errorf("costs = %+v, want %+v", c, want)
	}
	// 1 core of sidecar per 10^6 µs: 1M requests at 1 µs each.
	p := size(c, 1e6, f.keyLoad(), balanced, 1, 2, 64)
	if !near(p.sidecarCores, 1) || !near(p.redisCores, 0.4) || !p.feasible || p.shards != 1 {
		t.Errorf("size = %.2f sidecar cores, %.2f Redis cores, %d shards (feasible %v); want 1, 0.4, 1", p.sidecarCores,
			p.redisCores, p.shards, p.feasible)
	}
	// Every bucket carries the same load whatever the requests' skew.
	if kl := f.keyLoad(); !near(kl.hottestKey, 0.001) {
		t.Errorf("hottest bucket takes %v of the usages, want 1/1000", kl.hottestKey)
	}
}

// TestGovernedTable: requests governed per core are usages per core times requests per usage, against
// ShouldRateLimit's decisions per core; 100× needs 100 × (RLQS µs per usage) / (µs per decision) requests.
func TestGovernedTable(t *testing.T) {
	t.Parallel()
	f := rlqsFleet{envoys: 100, buckets: 1000, interval: 5 * time.Second}
	got := governedTable(costs{name: "a", sidecarUs: 20}, usageCosts{sidecarUs: 40, usagesPerReport: 20}, f, 1e6, 100)
	for _, want := range []string{
		"50000 decisions per core-second", // 1e6 / 20
		"| 1 | 2.5e+04 | 0.5× |",          // 25,000 usages per core
		"| 1000 | 2.5e+07 | 500.0× |",
		"| 50 (100 Envoys × 1000 buckets, 5s at 1000000 requests/s) | 1.25e+06 | 25.0× |",
		"needs at least 200.0 requests per usage: 40 requests/s per bucket and Envoy",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}

// TestRunRLQSRow: a harness run with scenario rlqs gives the model its RLQS row and the governed table.
func TestRunRLQSRow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	results := filepath.Join(dir, "results.json")
	const js = `{"command": "go run ./bench/harness", "summary": [
		{"name": "a", "label": "(a)", "server_cpu_us_per_decision": 20, "redis_cpu_us_per_decision": 4},
		{"name": "rlqs", "label": "(rlqs)", "server_cpu_us_per_decision": 800, "redis_cpu_us_per_decision": 200,
		 "redis_bytes_per_decision": 4000,
		 "rlqs": {"streams": 200, "buckets": 20, "interval_s": 5, "server_cpu_us_per_usage": 40, "redis_cpu_us_per_usage": 10}}]}`
	page := filepath.Join(dir, "capacity.md")
	blocks := ""
	for _, name := range []string{"result", "inputs", "rlqs"} {
		blocks += blockStart(name) + blockEnd(name)
	}
	if err := os.WriteFile(results, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, []byte(blocks), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(t.Context(), []string{"-keys", "1000", "-results", results, "-publish", page}, &out, &out); err != nil {
		t.Fatal(err)
	}
	// 40 µs per usage over 50 requests per usage: 0.8 µs per request, 0.8 cores at 1M/s.
	if want := "| RLQS, 100 Envoys × 1000 buckets at 5s reports (50 requests per usage) | 0.8 | 0.2 | 0.8 (1) | 0.2 |"; !strings.Contains(out.String(), want) {
		t.Errorf("no %q in\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "| rlqs |") || strings.Contains(out.String(), "| (rlqs) |") {
		t.Errorf("scenario rlqs's per-report costs sized as per-decision ones:\n%s", out.String())
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "needs at least 200.0 requests per usage") {
		t.Errorf("no governed table in the page:\n%s", b)
	}

	// -rlqs-results alone rewrites the rlqs part and leaves the rest of the page as it was.
	only := filepath.Join(dir, "only.md")
	if err := os.WriteFile(only, []byte("keep\n"+blockStart("rlqs")+blockEnd("rlqs")), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"-keys", "1000", "-rlqs-results", results, "-publish", only}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if b, err = os.ReadFile(only); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "keep\n") || !strings.Contains(string(b), "| RLQS, 100 Envoys") ||
		!strings.Contains(string(b), "| sidecar, 1 descriptor, batched (a) | 20 | 4 |") {
		t.Errorf("rlqs part:\n%s", b)
	}
}
