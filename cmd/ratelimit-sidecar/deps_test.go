package main

import (
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/codecheck"
)

// TestShipsNoTestHelpers keeps internal/testutil out of the binary: what
// lives there is for tests and the benchmark harness only. The redistest case
// checks that the check sees a helper at all.
func TestShipsNoTestHelpers(t *testing.T) {
	t.Parallel()
	const testutil = "github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/"
	codecheck.CheckLayers(t, func(p string) bool { return strings.HasPrefix(p, testutil) },
		codecheck.Layer{Pkg: ".", Reached: false},
		codecheck.Layer{Pkg: "../../internal/testutil/redistest", Reached: true},
	)
}
