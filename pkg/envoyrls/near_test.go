package envoyrls

import (
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestNearLimitRatio: an allowed decision is near_limit once the hits
// counted exceed the limit times Options.NearLimitRatio, rounded down
// (default 0.8), as the reference's NEAR_LIMIT_RATIO.
func TestNearLimitRatio(t *testing.T) {
	t.Parallel()
	const ten = "domain: n\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	for _, tt := range []struct {
		ratio     float64
		firstNear int // the hit whose decision is the first near_limit
	}{{0, 9}, {0.8, 9}, {0.5, 6}, {0.99, 10}, {1, 0}} {
		rec := &recorder{}
		f := newFixture(t, window.NewMemory(), ten, func(o *Options) { o.Observer = rec; o.NearLimitRatio = tt.ratio })
		for range 10 {
			f.call(t, "n", desc("k", "v"))
		}
		first := 0
		for i, d := range rec.decisions {
			if strings.HasSuffix(d, "/near_limit") {
				first = i + 1
				break
			}
		}
		if first != tt.firstNear {
			t.Errorf("NearLimitRatio %v: first near_limit at hit %d, want %d (%q)", tt.ratio, first, tt.firstNear, rec.decisions)
		}
	}
	if _, err := NewServer(Options{Store: window.NewMemory(), NearLimitRatio: 1.5}); err == nil {
		t.Error("NewServer with NearLimitRatio 1.5 = nil error, want one")
	}
}
