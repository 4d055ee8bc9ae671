package main

import (
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
