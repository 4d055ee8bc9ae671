package rules_test

import (
	"slices"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/codecheck"
)

// responseTypes are the Envoy packages, by import path, that hold what a
// server writes in a response: the RateLimitService's messages
// (current_limit, the response itself) and the HeaderValue of the 429's
// headers. Compiled rules describe limits; the parts of an answer belong to
// the server that builds it (envoyrls keeps them beside the rules it
// serves).
var responseTypes = []string{
	"github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3",
	"github.com/envoyproxy/go-control-plane/envoy/config/core/v3",
}

// TestImportsNoResponseTypes keeps pkg/rules free of Envoy's response
// types, directly or not. The envoyrls case checks that the check sees
// them at all.
func TestImportsNoResponseTypes(t *testing.T) {
	t.Parallel()
	codecheck.CheckLayers(t, func(p string) bool { return slices.Contains(responseTypes, p) },
		codecheck.Layer{Pkg: ".", Reached: false},
		codecheck.Layer{Pkg: "../envoyrls", Reached: true},
	)
}
