//go:build e2e

package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// The bucket of testdata/bucket.yaml.
const (
	bucketBurst    = 3
	bucketRate     = 30              // per minute
	bucketInterval = 2 * time.Second // one token back
)

// TestTokenBucketHeaders: through a real Envoy with DRAFT_VERSION_03
// headers, a token bucket admits its burst at once and then one request
// per interval. x-ratelimit-limit is the rate, x-ratelimit-remaining the
// whole tokens left, x-ratelimit-reset the time until the bucket is full
// (Envoy truncates it to whole seconds), and a 429's retry-after the whole
// seconds, at least 1, until one token is back. Timing on a busy machine
// varies, so the checks are relations that hold whenever the requests
// arrive: k tokens taken means the bucket is full in more than k-1 and at
// most k intervals.
func TestTokenBucketHeaders(t *testing.T) {
	t.Parallel()
	rules, err := filepath.Abs(filepath.Join("testdata", "bucket.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Through Redis, where replicas keep a bucket: its TAT string and the
	// script's reply are what Envoy's headers are made from.
	sc := startSidecar(t, "sidecar-bucket", sidecarOptions{Bin: sidecarBin, Rules: rules, RedisURL: redistest.Start(t).URL(), RedisTimeout: redisTimeout})
	app := startUpstream(t)
	cfg := writeEnvoyConfig(t, envoyBin, t.TempDir(), envoyParams{
		ListenAddr: "127.0.0.1",
		AppPort:    port(t, app.Listener.Addr().String()),
		RLSPort:    port(t, sc.GRPCAddr),
		Domain:     "bucket",
		Timeout:    filterTimeout,
	})
	e := startEnvoy(t, envoyBin, "envoy-bucket", cfg)
	c := newClient(t)
	const key, path = "bucket-key", "/bucket"
	iv := int(bucketInterval / time.Second)

	// Until the first 429: the burst, and more only if a token came back
	// meanwhile (over T, at most burst + rate x T).
	start := time.Now()
	var allowed []*result
	var denied *result
	for denied == nil && len(allowed) < 3*bucketBurst {
		r := c.get(t, e, path, key)
		if r.Status == http.StatusTooManyRequests {
			denied = r
			break
		}
		allowed = append(allowed, r)
	}
	elapsed := time.Since(start)
	if denied == nil {
		t.Fatalf("no 429 in %d requests: %v", len(allowed), allowed)
	}
	most := bucketBurst + int(elapsed/bucketInterval)
	if len(allowed) < bucketBurst || len(allowed) > most {
		t.Fatalf("%d requests allowed in %v before a 429, want %d to %d", len(allowed), elapsed, bucketBurst, most)
	}
	if elapsed < bucketInterval && len(allowed) != bucketBurst {
		t.Errorf("%d requests allowed in %v, want the burst, %d", len(allowed), elapsed, bucketBurst)
	}
	for i, r := range allowed {
		checkBucket(t, r, http.StatusOK)
		if elapsed < bucketInterval { // no token came back: it counts down from the burst
			if got := headerInt(r, "x-ratelimit-remaining"); got != bucketBurst-1-i {
				t.Errorf("%v: x-ratelimit-remaining %d, want %d", r, got, bucketBurst-1-i)
			}
		}
	}
	checkBucket(t, denied, http.StatusTooManyRequests)
	retry, reset := headerInt(denied, "retry-after"), headerInt(denied, "x-ratelimit-reset")
	// The bucket is empty: full in (burst-1, burst] intervals, so one token
	// is back in (reset - (burst-1) x interval) rounded up, at least 1.
	if low := reset - (bucketBurst-1)*iv; retry < max(1, low) || retry > max(1, low+1) || retry > iv {
		t.Errorf("%v: retry-after %d, want %d to %d (x-ratelimit-reset %d)", denied, retry, max(1, low), max(1, low+1), reset)
	}
	t.Logf("allowed: %v", allowed[0])
	t.Logf("denied:  %v", denied)

	// retry-after is exact: a token is back by then.
	time.Sleep(time.Duration(retry)*time.Second + 50*time.Millisecond)
	r := c.get(t, e, path, key)
	checkBucket(t, r, http.StatusOK)
	// x-ratelimit-reset is when the bucket is full (Envoy truncates it):
	// one more second and it is.
	time.Sleep(time.Duration(headerInt(r, "x-ratelimit-reset")+1) * time.Second)
	r = c.get(t, e, path, key)
	checkBucket(t, r, http.StatusOK)
	if got := headerInt(r, "x-ratelimit-remaining"); got != bucketBurst-1 {
		t.Errorf("%v: x-ratelimit-remaining %d once full, want %d", r, got, bucketBurst-1)
	}
	if got := app.count(path); got != len(allowed)+2 {
		t.Errorf("upstream saw %d requests, want %d", got, len(allowed)+2)
	}
}

// checkBucket checks one answer of the bucket: its status, the rate in
// x-ratelimit-limit, and x-ratelimit-reset against the tokens taken
// (burst - remaining): k taken, the bucket is full in more than k-1 and
// at most k intervals, truncated to whole seconds.
func checkBucket(t *testing.T, r *result, status int) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%v, want %d", r, status)
		return
	}
	if got, want := r.Header.Get("x-ratelimit-limit"), "30, 30;w=60"; got != want {
		t.Errorf("%v: x-ratelimit-limit %q, want %q", r, got, want)
	}
	remaining := headerInt(r, "x-ratelimit-remaining")
	if remaining < 0 || remaining >= bucketBurst {
		t.Errorf("%v: x-ratelimit-remaining %d, want 0 to %d", r, remaining, bucketBurst-1)
		return
	}
	iv := int(bucketInterval / time.Second)
	taken := bucketBurst - remaining
	if reset := headerInt(r, "x-ratelimit-reset"); reset < (taken-1)*iv || reset > taken*iv {
		t.Errorf("%v: x-ratelimit-reset %d with %d tokens taken, want %d to %d", r, reset, taken, (taken-1)*iv, taken*iv)
	}
	if status == http.StatusTooManyRequests {
		if remaining != 0 || r.Header.Get("x-envoy-ratelimited") != "true" || headerInt(r, "retry-after") < 1 {
			t.Errorf("%v: want x-ratelimit-remaining 0, x-envoy-ratelimited and retry-after >= 1", r)
		}
	} else if r.Header.Get("retry-after") != "" {
		t.Errorf("%v: retry-after on a 200", r)
	}
}
