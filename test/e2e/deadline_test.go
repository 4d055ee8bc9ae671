//go:build e2e

package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/faultproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// TestEnvoyDeadlineReachesRedis puts Redis 30 ms away (a fault proxy adding
// 30 ms each way) behind a sidecar with its default timeouts, and two real
// Envoys in front of it. With a 2 s filter timeout Envoy waits long enough
// for Redis, and the sidecar, which follows the deadline Envoy sends
// instead of its own 15 ms, decides from Redis: limits are enforced and no
// answer comes from a failure mode. With a 20 ms filter timeout Redis cannot
// answer in time, and the failure mode does, before Envoy gives up. With a
// filter timeout of 0s (none, since Envoy 1.38) Envoy waits, and the
// sidecar's -redis-timeout bounds the call.
func TestEnvoyDeadlineReachesRedis(t *testing.T) {
	t.Parallel()
	rds := redistest.Start(t)
	p, err := faultproxy.Start(t.Context(), rds.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	const latency = 30 * time.Millisecond
	p.Set(faultproxy.Fault{Latency: latency})
	rules, err := filepath.Abs(filepath.Join("testdata", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, "sidecar-far-redis", sidecarOptions{
		Bin: sidecarBin, Rules: rules, RedisURL: "redis://" + p.Addr() + "/0", RedisTimeout: config.DefaultRedisTimeout,
	})
	// Since Envoy 1.38 a filter timeout of 0s means none: Envoy sends no
	// deadline, and the sidecar's -redis-timeout bounds the call instead.
	// This one's is long enough for Redis.
	patient := startSidecar(t, "sidecar-far-redis-1s", sidecarOptions{
		Bin: sidecarBin, Rules: rules, RedisURL: "redis://" + p.Addr() + "/0", RedisTimeout: time.Second,
	})
	app := startUpstream(t)
	envoys := map[string]*envoy{}
	for _, tt := range []struct {
		name, timeout string
		sidecar       *sidecar
	}{{"envoy-2s", "2s", sc}, {"envoy-20ms", "0.02s", sc}, {"envoy-no-timeout", "0s", patient}} {
		cfg := writeEnvoyConfig(t, envoyBin, t.TempDir(), envoyParams{
			ListenAddr: "127.0.0.1", AppPort: port(t, app.Listener.Addr().String()), RLSPort: port(t, tt.sidecar.GRPCAddr),
			Domain: domain, Timeout: tt.timeout,
		})
		envoys[tt.name] = startEnvoy(t, envoyBin, tt.name, cfg)
	}

	t.Run("2s_filter_timeout_enforces_limits", func(t *testing.T) {
		e := envoys["envoy-2s"]
		c := newClient(t)
		freshWindow(3*time.Second, 2*time.Second)
		stats0 := ratelimitStats(t, e)
		var rs []*result
		for range 5 { // api_key: 4 per 3 s
			rs = append(rs, c.get(t, e, "/far/2s", "key-far"))
		}
		for i, r := range rs[:4] {
			checkAllowed(t, r, 4, 3-i)
		}
		checkTooMany(t, rs[4], 4, "4 per 3 seconds", 3*time.Second)
		for _, r := range rs {
			// Each decision went to Redis and back through the proxy.
			if r.Took < 2*latency {
				t.Errorf("%v: took less than the %v round trip to Redis", r, 2*latency)
			}
		}
		stats := ratelimitStats(t, e)
		for k, want := range map[string]int{"ok": 4, "over_limit": 1, "error": 0, "failure_mode_allowed": 0} {
			if d := stats[k] - stats0[k]; d != want {
				t.Errorf("%s%s went up by %d, want %d", statPrefix, k, d, want)
			}
		}
		if _, timedOut := rlsCalls(t, e); timedOut != 0 {
			t.Errorf("%d calls to the sidecar timed out, want 0", timedOut)
		}
	})

	t.Run("0s_filter_timeout_waits", func(t *testing.T) {
		e := envoys["envoy-no-timeout"]
		c := newClient(t)
		freshWindow(3*time.Second, 2*time.Second)
		for i := range 4 {
			r := c.get(t, e, "/far/none", "key-far-none")
			checkAllowed(t, r, 4, 3-i)
			// Longer than Envoy's default 20 ms: 0s is no timeout, not the
			// default.
			if r.Took < 2*latency {
				t.Errorf("%v: took less than the %v round trip to Redis", r, 2*latency)
			}
		}
		if _, timedOut := rlsCalls(t, e); timedOut != 0 {
			t.Errorf("%d calls to the sidecar timed out, want 0", timedOut)
		}
	})

	t.Run("20ms_filter_timeout_gets_the_failure_mode", func(t *testing.T) {
		e := envoys["envoy-20ms"]
		c := newClient(t)
		const n = 20
		answered0, timedOut0 := rlsCalls(t, e)
		var took []time.Duration
		for range n {
			r := c.get(t, e, "/far/20ms", "key-far-20ms")
			took = append(took, r.Took.Round(100*time.Microsecond))
			// failure_mode: error (the rules' default) answers Unavailable,
			// or Envoy times out; either way this Envoy fails open.
			if r.Status != http.StatusOK || r.Header.Get("x-ratelimit-limit") != "" {
				t.Errorf("%v, want 200 without x-ratelimit-limit (no decision from Redis)", r)
			}
		}
		answered, timedOut := rlsCalls(t, e)
		answered, timedOut = answered-answered0, timedOut-timedOut0
		t.Logf("of %d calls the sidecar answered %d, %d timed out in Envoy; requests took %v", n, answered, timedOut, took)
		// The sidecar gives Redis 15 ms of the 20 and answers with the
		// failure mode at once after. A sidecar that waited for Redis (60 ms
		// away) would answer none in time. On a machine shared with other
		// busy processes, some answers may still miss Envoy's 20 ms by
		// scheduling delay outside the sidecar (16 of 20 were seen with the
		// load average at 13), so the test asks for a majority, which a
		// sidecar waiting for Redis cannot reach. (Envoy counts a late call
		// as timed out, or, when the late answer races the timer, under
		// neither counter.)
		if answered < n/2 || answered > n {
			t.Errorf("%d calls to the sidecar answered (and %d timed out), want at least %d of %d: the failure mode must answer within the filter timeout",
				answered, timedOut, n/2, n)
		}
		if got := app.count("/far/20ms"); got != n {
			t.Errorf("upstream saw %d requests, want %d (fail open)", got, n)
		}
	})
}
