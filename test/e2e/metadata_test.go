//go:build e2e

package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// TestEnvoyTakesDynamicMetadata: Envoy accepts responses that carry
// dynamic_metadata (-response-dynamic-metadata): allowed requests pass and
// the one over the limit gets its 429, as without it. A response Envoy
// could not take would be a filter error, which this fail-open Envoy lets
// through.
func TestEnvoyTakesDynamicMetadata(t *testing.T) {
	redis, app := redistest.Start(t), startUpstream(t)
	rules, err := filepath.Abs(filepath.Join("testdata", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, "sidecar-metadata", sidecarOptions{
		Bin: sidecarBin, Rules: rules, RedisURL: redis.URL(), RedisTimeout: redisTimeout,
		Args: []string{"-response-dynamic-metadata"},
	})
	cfg := writeEnvoyConfig(t, envoyBin, t.TempDir(), envoyParams{
		ListenAddr: "127.0.0.1",
		AppPort:    port(t, app.Listener.Addr().String()),
		RLSPort:    port(t, sc.GRPCAddr),
		Domain:     domain,
		Timeout:    filterTimeout,
	})
	e := startEnvoy(t, envoyBin, "envoy-metadata", cfg)
	c := newClient(t)
	freshWindow(window3s, 1500*time.Millisecond)
	rs := c.burst(t, []*envoy{e}, "/metadata", "key-metadata", keyLimit+1)
	for i, r := range rs[:keyLimit] {
		checkAllowed(t, r, keyLimit, keyLimit-1-i)
	}
	checkTooMany(t, rs[keyLimit], keyLimit, "4 per 3 seconds", window3s)
}
