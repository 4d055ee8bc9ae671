//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// TestEnvoyRetryAfterHeader: Envoy 1.40's enable_retry_after_header adds a
// Retry-After to its 429 from the largest duration_until_reset among the
// OVER_LIMIT statuses, unless the service sent one. The sidecar always
// sends its own (it cannot see Envoy's configuration): when a retry of the
// same request would be admitted, which for a token bucket or a sliding
// window or log is sooner than a full reset. So with the option on, every
// 429, for every algorithm, must carry exactly one retry-after, the
// sidecar's (the JSON body says the same), and a retry after that many
// seconds must pass; for a request two limits deny, the longer wait.
func TestEnvoyRetryAfterHeader(t *testing.T) {
	t.Parallel()
	rules, err := filepath.Abs(filepath.Join("testdata", "retryafter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, "sidecar-retry", sidecarOptions{Bin: sidecarBin, Rules: rules, RedisURL: redistest.Start(t).URL(), RedisTimeout: redisTimeout})
	app := startUpstream(t)
	cfg := writeEnvoyConfig(t, envoyBin, t.TempDir(), envoyParams{
		ListenAddr: "127.0.0.1", AppPort: port(t, app.Listener.Addr().String()), RLSPort: port(t, sc.GRPCAddr),
		Domain: "retry", Timeout: filterTimeout, RetryAfterHeader: true,
	})
	e := startEnvoy(t, envoyBin, "envoy-retry", cfg)
	if dump := e.adminGet(t, "/config_dump"); !strings.Contains(dump, `"enable_retry_after_header": true`) {
		t.Fatal("Envoy's config_dump does not show enable_retry_after_header: true")
	}
	for _, tt := range []struct {
		key      string
		min, max int // seconds the retry-after may say
		retry    bool
	}{
		{"fixed", 1, 3, true},
		{"sliding", 1, 6, true},
		{"bucket", 1, 2, true},
		{"log", 1, 3, true},
		// Denied by its 3 s window and by its path's 1 minute log: the
		// log's wait, far past the window's.
		{"two", 4, 60, false},
	} {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			c := newClient(t)
			path := "/retry/" + tt.key
			freshWindow(3*time.Second, 2*time.Second)
			var denied *result
			for i := 0; i < 3 && denied == nil; i++ {
				if r := c.get(t, e, path, tt.key); r.Status == http.StatusTooManyRequests {
					denied = r
				}
			}
			if denied == nil {
				t.Fatalf("3 requests with api_key %s: none denied", tt.key)
			}
			got := denied.Header.Values("retry-after")
			if len(got) != 1 {
				t.Fatalf("%v: retry-after %q, want exactly one", denied, got)
			}
			secs, err := strconv.Atoi(got[0])
			if err != nil || secs < tt.min || secs > tt.max {
				t.Errorf("%v: retry-after %q, want %d..%d seconds", denied, got[0], tt.min, tt.max)
			}
			var body tooManyRequests
			if err := json.Unmarshal(denied.Body, &body); err != nil || body.RetryAfterSeconds != secs {
				t.Errorf("%v: body says retry_after_seconds %d (%v), header %d: want the sidecar's header", denied, body.RetryAfterSeconds, err, secs)
			}
			if !tt.retry {
				return
			}
			time.Sleep(time.Duration(secs) * time.Second)
			if r := c.get(t, e, path, tt.key); r.Status != http.StatusOK {
				t.Errorf("retry after the %ds retry-after: %v, want 200", secs, r)
			}
		})
	}
}
