//go:build e2e

package e2e

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// Settings shared by every test bootstrap and sidecar.
const (
	domain = "e2e" // testdata/rules.yaml
	// filterTimeout is the ratelimit filter's timeout: above deploy's 0.02s so
	// a busy shared machine does not turn decisions into timeouts.
	filterTimeout = "0.05s"
	// redisTimeout bounds each Redis call of a sidecar. A Redis that is down
	// fails calls at once (one dial attempt, then the circuit breaker), but
	// one that stalls holds a call for all of it, so it must leave the
	// failure mode time to reach Envoy within filterTimeout; and it must
	// leave a working Redis time to answer on a busy machine.
	redisTimeout = 25 * time.Millisecond
)

// stack is two edge pods (Envoy and sidecar each) sharing one Redis, in
// front of one upstream.
type stack struct {
	redis    *redistest.Server
	app      *upstream
	sidecars []*sidecar
	open     *envoy // failure_mode_deny: false, talks to sidecars[0]
	closed   *envoy // failure_mode_deny: true, talks to sidecars[1]
}

func startStack(t *testing.T) *stack {
	t.Helper()
	start := time.Now()
	st := &stack{redis: redistest.Start(t), app: startUpstream(t)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- redis-server log ---\n%s", st.redis.Log())
		}
	})
	rules, err := filepath.Abs(filepath.Join("testdata", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sidecar-a", "sidecar-b"} {
		st.sidecars = append(st.sidecars, startSidecar(t, name, sidecarOptions{
			Bin: sidecarBin, Rules: rules, RedisURL: st.redis.URL(), RedisTimeout: redisTimeout,
		}))
	}
	appPort := port(t, st.app.Listener.Addr().String())
	for i, e := range []**envoy{&st.open, &st.closed} {
		deny := i == 1
		name := "envoy-open"
		if deny {
			name = "envoy-closed"
		}
		cfg := writeEnvoyConfig(t, envoyBin, t.TempDir(), envoyParams{
			ListenAddr:      "127.0.0.1",
			AppPort:         appPort,
			RLSPort:         port(t, st.sidecars[i].GRPCAddr),
			Domain:          domain,
			Timeout:         filterTimeout,
			FailureModeDeny: deny,
		})
		*e = startEnvoy(t, envoyBin, name, cfg)
	}
	t.Logf("stack up in %v: redis %s, sidecars %s and %s, envoys %s (fail open) and %s (fail closed), upstream %s",
		time.Since(start).Round(time.Millisecond), st.redis.Addr, st.sidecars[0].GRPCAddr, st.sidecars[1].GRPCAddr,
		st.open.Listener, st.closed.Listener, st.app.Listener.Addr())
	return st
}

func port(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	return n
}
