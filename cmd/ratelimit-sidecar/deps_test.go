package main

import (
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/codecheck"
)

// TestShipsNoTestHelpers keeps internal/testutil out of the binary: what
// lives there is for tests and the benchmark harness only. The e2e case
// checks that the check sees a helper at all.
func TestShipsNoTestHelpers(t *testing.T) {
	t.Parallel()
	const testutil = "github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/"
	for _, tt := range []struct {
		pkg  string
		want bool // some test helper is among its deps
	}{
		{".", false},
		{"../../internal/testutil/redistest", true},
	} {
		got, err := codecheck.Reaches(tt.pkg, func(p string) bool { return strings.HasPrefix(p, testutil) })
		if err != nil {
			t.Fatal(err)
		}
		if (len(got) > 0) != tt.want {
			t.Errorf("go list -deps %s reaches %v; want test helpers: %v", tt.pkg, got, tt.want)
		}
	}
}
