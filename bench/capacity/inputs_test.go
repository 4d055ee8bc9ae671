package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadHarness reads the summary fields the model takes from harness-shaped JSON: the scenario's name beside
// the shared result.Summary, and its key space.
func TestReadHarness(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	const js = `{"command": "go run ./bench/harness", "summary": [
		{"name": "noop", "label": "noop", "server_cpu_us_per_decision": 13.5},
		{"name": "a", "label": "(a)", "server_cpu_us_per_decision": 20.7, "redis_cpu_us_per_decision": 4.4,
		 "round_trips_per_decision": 0.08, "redis_bytes_per_decision": 88},
		{"name": "million", "label": "million", "key_space": {"redis_bytes_per_key": 145}}]}`
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := readHarness(path)
	if err != nil {
		t.Fatal(err)
	}
	cs := h.costs()
	want := costs{name: "a", sidecarUs: 20.7, redisUs: 4.4, roundTrips: 0.08, redisBytes: 88}
	if len(cs) != 1 || cs[0] != want {
		t.Errorf("costs() = %+v, want [%+v]", cs, want)
	}
	if got := h.bytesPerKey("million"); got != 145 {
		t.Errorf("bytesPerKey(million) = %v, want 145", got)
	}
}
