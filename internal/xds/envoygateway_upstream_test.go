//go:build upstream

package xds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvoyGatewayUpstreamConfigs loads every RateLimitConfig file of
// Envoy Gateway's translator testdata (its
// internal/xds/translator/testdata/out/ratelimit-config, read from the
// directory EG_RATELIMIT_CONFIG_DIR names; skipped when unset) as
// TestEnvoyGatewayConfigs loads ours: pushed over a real xDS server, each
// must be ACKed, and every limit in it must answer from where it was
// written. The upstream files are not part of this repository; run with
//
//	git -C "$GATEWAY" archive v1.9.0 internal/xds/translator/testdata/out/ratelimit-config | tar -x -C "$DIR"
//	EG_RATELIMIT_CONFIG_DIR="$DIR"/internal/xds/translator/testdata/out/ratelimit-config \
//	  go test -tags upstream,vtprotobuf -run TestEnvoyGatewayUpstreamConfigs -v ./internal/xds/
func TestEnvoyGatewayUpstreamConfigs(t *testing.T) {
	dir := os.Getenv("EG_RATELIMIT_CONFIG_DIR")
	if dir == "" {
		t.Skip("EG_RATELIMIT_CONFIG_DIR is not set")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".routes.yaml") { // Envoy's side: the routes' rate_limits
			continue
		}
		n++
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			configs, err := loadRateLimitConfigs(f)
			if err != nil {
				t.Fatal(err)
			}
			checkLeaves(t, pushEnvoyGateway(t, configs), configs)
		})
	}
	if n == 0 {
		t.Fatalf("no RateLimitConfig file in %s", dir)
	}
}
