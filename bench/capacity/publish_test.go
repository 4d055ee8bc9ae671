package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplaceBlock: a block's content is replaced, what surrounds it kept, and a missing marker is an error.
func TestReplaceBlock(t *testing.T) {
	t.Parallel()
	page := "intro\n" + blockStart("result") + "old\n" + blockEnd("result") + "outro\n"
	got, err := replaceBlock(page, "result", "new")
	if want := "intro\n" + blockStart("result") + "new\n" + blockEnd("result") + "outro\n"; err != nil || got != want {
		t.Errorf("replaceBlock = %q, %v, want %q", got, err, want)
	}
	if _, err := replaceBlock(page, "inputs", "x"); err == nil {
		t.Error("replaceBlock of a missing block: no error")
	}
}

// TestReadCeiling: medians per sub-benchmark and metric from go test -bench output, and the a-load cost set.
func TestReadCeiling(t *testing.T) {
	t.Parallel()
	out := `goos: linux
BenchmarkShardCeiling/fixed-2   	 1000	  3000 ns/op	  0.42 redis-core	  1.60 redis-µs/decision	 625000 ceiling-decisions/s	  0.050 round-trips/decision	  100 B/op	  2 allocs/op
BenchmarkShardCeiling/fixed-2   	 1000	  3000 ns/op	  0.44 redis-core	  1.70 redis-µs/decision	 588235 ceiling-decisions/s	  0.040 round-trips/decision	  100 B/op	  2 allocs/op
BenchmarkShardCeiling/fixed-2   	 1000	  3000 ns/op	  0.43 redis-core	  1.65 redis-µs/decision	 606060 ceiling-decisions/s	  0.045 round-trips/decision	  100 B/op	  2 allocs/op
BenchmarkShardCeiling/sliding-2 	 1000	  3000 ns/op	  0.61 redis-core	  4.50 redis-µs/decision	 222222 ceiling-decisions/s	  0.045 round-trips/decision	  100 B/op	  2 allocs/op
PASS
`
	path := filepath.Join(t.TempDir(), "ceiling.txt")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := readCeiling(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.median("fixed", "redis-µs/decision"); !near(got, 1.65) {
		t.Errorf("median fixed redis-µs/decision = %v, want 1.65", got)
	}
	load, ok := c.loadCosts(costs{name: "a", sidecarUs: 20, redisUs: 5, roundTrips: 0.07})
	if want := (costs{name: "a-load", sidecarUs: 20, redisUs: 1.65, roundTrips: 0.045}); !ok || load.name != want.name ||
		!near(load.redisUs, want.redisUs) || !near(load.roundTrips, want.roundTrips) || load.sidecarUs != want.sidecarUs {
		t.Errorf("loadCosts = %+v, %v, want %+v", load, ok, want)
	}
	if tab := c.table(); !strings.Contains(tab, "| fixed window, 1,000 keys | 1.65 (1.60–1.70) | 0.42–0.44 | 606061 | 0.045 |") {
		t.Errorf("table:\n%s", tab)
	}
}
