package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTables: each cell is the median over the runs, a column per server.
func TestTables(t *testing.T) {
	t.Parallel()
	r := func(server string, p99 float64, back float64) Result {
		return Result{Fault: "blackhole", Server: server, During: Phase{P50ms: 1, P99ms: p99}, BackToNormal: back}
	}
	md := Tables([]Result{r("sidecar", 5, 1), r("reference", 900, -1), r("sidecar", 7, 2), r("reference", 1000, -1), r("sidecar", 90, -1)})
	for _, want := range []string{
		"| median of 3 run(s) | sidecar | reference |",
		"| p50 / p99 during (ms) | 1.0 / 7.0 | 1.0 / 900.0 |", // medians of 5, 7, 90 and of 900, 1000 (the lower middle)
		"| back to normal after the fault | 2.0 s | not within the run |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("tables lack %q:\n%s", want, md)
		}
	}
}

// TestCharts: both charts are written as PNG files.
func TestCharts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bins := Timeline([]Call{{At: 0, Latency: 1e6, Kind: OK}, {At: 3e9, Latency: 9e8, Kind: Unavailable}}, 4e9, 25e7)
	if err := Chart(filepath.Join(dir, "f.png"), []Result{{Fault: "f", Server: "sidecar", Timeline: bins}}, "f", 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := Chart(filepath.Join(dir, "g.png"), nil, "g", 1, 3); err == nil {
		t.Error("a chart of a fault with no results: no error")
	}
	samples := []SoakSample{{Replica: "files", At: 1, P99ms: 3, Usage: Usage{RSSMB: 30}}, {Replica: "files", At: 2, P99ms: 4, Usage: Usage{RSSMB: 31}}}
	if err := SoakChart(filepath.Join(dir, "soak.png"), samples); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"f.png", "soak.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
			t.Errorf("%s: not a PNG (%v)", f, err)
		}
	}
}
