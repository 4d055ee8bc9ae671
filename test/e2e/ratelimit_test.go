//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// The limits of testdata/rules.yaml.
const (
	keyLimit       = 4 // api_key, per 3 s
	addrLimit      = 6 // remote_address, per 3 s
	perSecondLimit = 2 // api_key per-second-*, per second
	strictLimit    = 4 // api_key strict-*, per 3 s, failure_mode: deny
	window3s       = 3 * time.Second
)

// TestEnvoyRateLimit runs the subtests in order against one stack; they use
// distinct API keys and client addresses, so each starts with fresh counters.
func TestEnvoyRateLimit(t *testing.T) {
	st := startStack(t)
	open, closed := st.open, st.closed

	t.Run("limit_counted_across_both_envoys", func(t *testing.T) {
		c := newClient(t)
		const path = "/across"
		freshWindow(window3s, 1500*time.Millisecond)
		rs := c.burst(t, []*envoy{open, closed}, path, "key-across", keyLimit+2)
		for i, r := range rs[:keyLimit] {
			checkAllowed(t, r, keyLimit, keyLimit-1-i)
		}
		// The (limit+1)-th request and the one after it, one on each Envoy.
		for _, r := range rs[keyLimit:] {
			checkTooMany(t, r, keyLimit, "4 per 3 seconds", window3s)
		}
		// One policy per descriptor (api_key, remote_address, api_key+path),
		// w in seconds with unit_multiplier applied.
		const wantLimit = "4, 4;w=3, 6;w=3, 10;w=3"
		for _, r := range rs {
			if got := r.Header.Get("x-ratelimit-limit"); got != wantLimit {
				t.Errorf("%v: x-ratelimit-limit %q, want %q", r, got, wantLimit)
			}
		}
		t.Logf("allowed: %v", rs[0])
		t.Logf("denied:  %v", rs[keyLimit])
		if got := st.app.count(path); got != keyLimit {
			t.Errorf("upstream saw %d requests for %s, want %d", got, path, keyLimit)
		}
	})

	t.Run("api_key_and_address_limits_are_independent", func(t *testing.T) {
		a, b, c, d := newClient(t), newClient(t), newClient(t), newClient(t)
		both := []*envoy{open, closed}
		freshWindow(window3s, 1500*time.Millisecond)

		// Key k1 from address a: the key's limit (4) is the first to run out.
		rs := a.burst(t, both, "/indep/a-k1", "k1", keyLimit+1)
		for i, r := range rs[:keyLimit] {
			checkAllowed(t, r, keyLimit, keyLimit-1-i)
		}
		checkTooMany(t, rs[keyLimit], keyLimit, "4 per 3 seconds", window3s)

		// A new key k2 from the same address: the address has 6-4 left, so k2
		// gets 2 although its own limit is 4, and then the address limit fires.
		rs = a.burst(t, both, "/indep/a-k2", "k2", addrLimit-keyLimit+1)
		for i, r := range rs[:addrLimit-keyLimit] {
			checkAllowed(t, r, addrLimit, addrLimit-keyLimit-1-i)
		}
		checkTooMany(t, rs[addrLimit-keyLimit], addrLimit, "6 per 3 seconds", window3s)

		// k1 from a fresh address b: the key's budget follows the key.
		checkTooMany(t, b.get(t, closed, "/indep/b-k1", "k1"), keyLimit, "4 per 3 seconds", window3s)

		// No key from c: only the address limit applies, so more than the key
		// limit passes, and x-ratelimit-limit lists one policy only.
		rs = c.burst(t, both, "/indep/c", "", addrLimit+1)
		for i, r := range rs[:addrLimit] {
			checkAllowed(t, r, addrLimit, addrLimit-1-i)
			if got, want := r.Header.Get("x-ratelimit-limit"), "6, 6;w=3"; got != want {
				t.Errorf("%v: x-ratelimit-limit %q, want %q (the remote_address policy only)", r, got, want)
			}
		}
		checkTooMany(t, rs[addrLimit], addrLimit, "6 per 3 seconds", window3s)

		// A new key from a new address passes while k1, a and c are spent.
		checkAllowed(t, d.get(t, open, "/indep/d-k3", "k3"), keyLimit, keyLimit-1)

		for path, want := range map[string]int{
			"/indep/a-k1": keyLimit, "/indep/a-k2": addrLimit - keyLimit, "/indep/b-k1": 0,
			"/indep/c": addrLimit, "/indep/d-k3": 1,
		} {
			if got := st.app.count(path); got != want {
				t.Errorf("upstream saw %d requests for %s, want %d", got, path, want)
			}
		}
	})

	t.Run("requests_pass_again_after_window_reset", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			key    string
			limit  int
			window time.Duration
			msg    string
		}{
			{"3s_window", "key-reset", keyLimit, window3s, "4 per 3 seconds"},
			{"1s_window", "per-second-reset", perSecondLimit, time.Second, "2 per second"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := newClient(t)
				both := []*envoy{open, closed}
				path := "/reset/" + tc.name
				freshWindow(tc.window, tc.window/2)
				rs := c.burst(t, both, path, tc.key, tc.limit+1)
				for i, r := range rs[:tc.limit] {
					checkAllowed(t, r, tc.limit, tc.limit-1-i)
				}
				denied := rs[tc.limit]
				checkTooMany(t, denied, tc.limit, tc.msg, tc.window)
				// retry-after is rounded up by the sidecar; x-ratelimit-reset
				// may be rounded down by Envoy. Wait for the larger.
				wait := time.Duration(max(headerInt(denied, "retry-after"), headerInt(denied, "x-ratelimit-reset"))) * time.Second
				if wait <= 0 || wait > tc.window {
					t.Fatalf("%v: wait %v from retry-after/x-ratelimit-reset, want in (0, %v]", denied, wait, tc.window)
				}
				t.Logf("denied with retry-after %s, x-ratelimit-reset %s: waiting %v",
					denied.Header.Get("retry-after"), denied.Header.Get("x-ratelimit-reset"), wait)
				time.Sleep(wait + 50*time.Millisecond)
				for _, e := range both {
					r := c.get(t, e, path, tc.key)
					if r.Status != http.StatusOK {
						t.Errorf("after waiting %v: %v, want 200", wait, r)
					}
				}
				if got, want := st.app.count(path), tc.limit+2; got != want {
					t.Errorf("upstream saw %d requests for %s, want %d", got, path, want)
				}
			})
		}
	})

	t.Run("redis_down", func(t *testing.T) {
		st.redis.Stop()
		for _, tc := range []struct {
			e            *envoy
			status       int
			upstreamSees bool
		}{
			{open, http.StatusOK, true},                     // failure_mode_deny: false
			{closed, http.StatusInternalServerError, false}, // failure_mode_deny: true
		} {
			t.Run(tc.e.Name, func(t *testing.T) {
				const n = 10
				c := newClient(t)
				path := "/outage/" + tc.e.Name
				var slowest time.Duration
				var took []time.Duration
				answered0, timedOut0 := rlsCalls(t, tc.e)
				for range n {
					r := c.get(t, tc.e, path, "key-outage")
					slowest = max(slowest, r.Took)
					took = append(took, r.Took.Round(100*time.Microsecond))
					if r.Status != tc.status {
						t.Errorf("%v, want %d", r, tc.status)
					}
					if h := r.Header.Get("x-ratelimit-limit"); h != "" {
						t.Errorf("%v: x-ratelimit-limit %q without a working store", r, h)
					}
					if r.Took >= time.Second {
						t.Errorf("%v: took %v, want < 1s (filter timeout %s)", r, r.Took, filterTimeout)
					}
				}
				t.Logf("%d requests answered %d; slowest took %v (filter timeout %s); all: %v", n, tc.status, slowest, filterTimeout, took)
				// The sidecar answered each call itself, before the filter
				// timeout: its failure mode decided, not Envoy's timeout.
				answered, timedOut := rlsCalls(t, tc.e)
				if answered-answered0 != n || timedOut != timedOut0 {
					t.Errorf("%d calls to the sidecar answered and %d timed out, want %d and 0", answered-answered0, timedOut-timedOut0, n)
				}
				want := 0
				if tc.upstreamSees {
					want = n
				}
				if got := st.app.count(path); got != want {
					t.Errorf("upstream saw %d requests for %s, want %d", got, path, want)
				}
			})
		}

		// Readiness follows the store, so a Kubernetes probe sees the outage.
		t.Run("readyz_503", func(t *testing.T) {
			for _, s := range st.sidecars {
				t.Logf("%s: /readyz 503 after %v", s.Name(), s.waitReadyz(t, http.StatusServiceUnavailable, 5*time.Second).Round(time.Millisecond))
			}
		})

		// A failure_mode: deny rule answers OVER_LIMIT, which Envoy turns
		// into a 429 even where it fails open.
		t.Run("deny_rule_answers_429", func(t *testing.T) {
			c := newClient(t)
			const path = "/outage/strict"
			for _, e := range []*envoy{open, closed} {
				r := c.get(t, e, path, "strict-1")
				checkTooMany(t, r, strictLimit, "4 per 3 seconds", window3s)
				if r.Took >= time.Second {
					t.Errorf("%v: took %v, want < 1s", r, r.Took)
				}
			}
			if got := st.app.count(path); got != 0 {
				t.Errorf("upstream saw %d requests for %s, want 0", got, path)
			}
		})
	})

	t.Run("sidecars_recover_after_redis_restart", func(t *testing.T) {
		pids := []int{st.sidecars[0].Pid(), st.sidecars[1].Pid()}
		st.redis.Restart(t)
		restarted := time.Now()
		poll := newClient(t)
		for {
			ra := poll.get(t, open, "/recover/poll", "")
			rb := poll.get(t, closed, "/recover/poll", "")
			// A decision, allowed or not, carries x-ratelimit-limit; the
			// fail-open pass and the fail-closed 500 do not.
			if ra.Header.Get("x-ratelimit-limit") != "" && rb.Header.Get("x-ratelimit-limit") != "" {
				break
			}
			if time.Since(restarted) > 10*time.Second {
				t.Fatalf("no decisions 10s after Redis restarted: %v; %v", ra, rb)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("both sidecars decide again %v after Redis restarted", time.Since(restarted).Round(time.Millisecond))
		for _, s := range st.sidecars {
			s.waitReadyz(t, http.StatusOK, 10*time.Second)
		}

		c := newClient(t)
		const path = "/recover"
		freshWindow(window3s, 1500*time.Millisecond)
		rs := c.burst(t, []*envoy{open, closed}, path, "key-recover", keyLimit+2)
		for i, r := range rs[:keyLimit] {
			checkAllowed(t, r, keyLimit, keyLimit-1-i)
		}
		for _, r := range rs[keyLimit:] {
			checkTooMany(t, r, keyLimit, "4 per 3 seconds", window3s)
		}
		for i, s := range st.sidecars {
			if s.Exited() || s.Pid() != pids[i] {
				t.Errorf("%s: exited %v, pid %d (was %d): want the same process throughout", s.Name(), s.Exited(), s.Pid(), pids[i])
			}
		}
	})

	t.Run("envoy_stats_match_requests", func(t *testing.T) {
		// Everything the test sent so far, as the ledger saw it.
		for _, e := range []*envoy{open, closed} {
			got := ratelimitStats(t, e)
			want := e.ledgerCopy()
			t.Logf("%s: stats %v, requests sent %v", e.Name, got, want)
			if want["unexpected"] > 0 {
				t.Errorf("%s: %d responses fit no ratelimit outcome", e.Name, want["unexpected"])
			}
			delete(want, "unexpected")
			for _, k := range statNames {
				if got[k] != want[k] {
					t.Errorf("%s: %s%s = %d, want %d", e.Name, statPrefix, k, got[k], want[k])
				}
			}
		}

		// And a sequence with the counts written out: 2 ok and 1 over_limit
		// on each Envoy, nothing else.
		before := map[string]map[string]int{open.Name: ratelimitStats(t, open), closed.Name: ratelimitStats(t, closed)}
		c := newClient(t)
		freshWindow(window3s, 1500*time.Millisecond)
		rs := c.burst(t, []*envoy{open, closed}, "/stats", "key-stats", keyLimit+2)
		for i, r := range rs[:keyLimit] {
			checkAllowed(t, r, keyLimit, keyLimit-1-i)
		}
		for _, r := range rs[keyLimit:] {
			checkTooMany(t, r, keyLimit, "4 per 3 seconds", window3s)
		}
		want := map[string]int{"ok": 2, "over_limit": 1}
		for _, e := range []*envoy{open, closed} {
			after := ratelimitStats(t, e)
			for _, k := range statNames {
				if d := after[k] - before[e.Name][k]; d != want[k] {
					t.Errorf("%s: %s%s went up by %d, want %d", e.Name, statPrefix, k, d, want[k])
				}
			}
		}
	})

	// After the outage, so go-redis has had something to say.
	t.Run("sidecar_logs_are_json", func(t *testing.T) { checkJSONLogs(t, st) })
}

// checkJSONLogs checks that each sidecar wrote only JSON objects, one per
// line, as -log-format json promises to log collectors that parse stderr
// line by line.
func checkJSONLogs(t *testing.T, st *stack) {
	for _, s := range st.sidecars {
		if bad := s.nonJSONLines(); len(bad) > 0 {
			t.Errorf("%s -log-format json wrote %d non-JSON line(s) to stderr, e.g.\n%s", s.Name(), len(bad), strings.Join(bad[:min(3, len(bad))], "\n"))
		}
	}
}

// rlsCalls returns two counters of Envoy's calls to the sidecar (its
// cluster "ratelimit"): answered, with HTTP/2 status 200, which carries any
// gRPC status, the failure mode's Unavailable included; and timed out, when
// the filter's timeout passed first.
func rlsCalls(t *testing.T, e *envoy) (answered, timedOut int) {
	t.Helper()
	c := e.counters(t, "cluster.ratelimit.upstream_rq_")
	return c["cluster.ratelimit.upstream_rq_200"], c["cluster.ratelimit.upstream_rq_timeout"]
}

// statPrefix and statNames are the ratelimit filter's counters in Envoy
// 1.40. The filter counts in the scope of the route's upstream cluster
// (app), not of the rate limit service's cluster.
const statPrefix = "cluster.app.ratelimit."

var statNames = []string{"ok", "over_limit", "error", "failure_mode_allowed"}

// ratelimitStats returns the filter's counters by short name. Envoy creates
// them on first use, so a missing one is 0.
func ratelimitStats(t *testing.T, e *envoy) map[string]int {
	t.Helper()
	all := e.counters(t, "ratelimit")
	out := map[string]int{}
	for _, k := range statNames {
		out[k] = all[statPrefix+k]
	}
	return out
}

// burst sends n requests, alternating between envoys.
func (c *client) burst(t *testing.T, envoys []*envoy, path, apiKey string, n int) []*result {
	t.Helper()
	rs := make([]*result, n)
	for i := range rs {
		rs[i] = c.get(t, envoys[i%len(envoys)], path, apiKey)
	}
	return rs
}

// freshWindow sleeps into the next epoch-aligned window of size when less
// than need is left of the current one, so a burst of requests lands in one
// window. The sidecars align windows the same way, on the same clock.
func freshWindow(size, need time.Duration) {
	left := size - time.Duration(time.Now().UnixNano()%int64(size))
	if left < need {
		time.Sleep(left + 20*time.Millisecond)
	}
}

// checkAllowed checks a request that reached the upstream: 200 with the
// x-ratelimit headers of the tightest limit.
func checkAllowed(t *testing.T, r *result, limit, remaining int) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Errorf("%v, want 200", r)
		return
	}
	if got := firstLimit(r); got != limit {
		t.Errorf("%v: x-ratelimit-limit starts with %d, want %d", r, got, limit)
	}
	if got := headerInt(r, "x-ratelimit-remaining"); got != remaining {
		t.Errorf("%v: x-ratelimit-remaining %d, want %d", r, got, remaining)
	}
}

// tooManyRequests is the sidecar's JSON body on OVER_LIMIT.
type tooManyRequests struct {
	Error             string `json:"error"`
	Message           string `json:"message"`
	RetryAfterSeconds int    `json:"retry_after_seconds"`
	Domain            string `json:"domain"`
}

// checkTooMany checks Envoy's 429 for the limit that fired: the sidecar's
// retry-after, content-type and JSON body, and Envoy's x-ratelimit and
// x-envoy-ratelimited headers.
func checkTooMany(t *testing.T, r *result, limit int, msg string, window time.Duration) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests {
		t.Errorf("%v, want 429", r)
		return
	}
	secs := int(window / time.Second)
	if got := r.Header.Get("x-envoy-ratelimited"); got != "true" {
		t.Errorf("%v: x-envoy-ratelimited %q, want \"true\"", r, got)
	}
	if got := r.Header.Values("content-type"); !slices.Equal(got, []string{"application/json"}) {
		t.Errorf("%v: content-type %q, want [application/json]", r, got)
	}
	retry := headerInt(r, "retry-after")
	if retry < 1 || retry > secs {
		t.Errorf("%v: retry-after %d, want 1..%d", r, retry, secs)
	}
	if got := firstLimit(r); got != limit {
		t.Errorf("%v: x-ratelimit-limit starts with %d, want %d", r, got, limit)
	}
	if got := r.Header.Get("x-ratelimit-remaining"); got != "0" {
		t.Errorf("%v: x-ratelimit-remaining %q, want 0", r, got)
	}
	if reset := headerInt(r, "x-ratelimit-reset"); reset < 0 || reset > secs {
		t.Errorf("%v: x-ratelimit-reset %d, want 0..%d", r, reset, secs)
	}
	var body tooManyRequests
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Errorf("%v: body is not JSON: %v", r, err)
		return
	}
	want := tooManyRequests{Error: "too_many_requests", RetryAfterSeconds: retry, Domain: domain, Message: body.Message}
	if body != want {
		t.Errorf("%v: body %+v, want %+v", r, body, want)
	}
	if !strings.Contains(body.Message, msg) {
		t.Errorf("%v: message %q, want it to mention %q", r, body.Message, msg)
	}
}

// headerInt returns the header as an integer, or -1 when it is missing or
// not one.
func headerInt(r *result, name string) int {
	n, err := strconv.Atoi(r.Header.Get(name))
	if err != nil {
		return -1
	}
	return n
}

// firstLimit returns the leading number of x-ratelimit-limit ("4, 4;w=1,
// 6;w=1"): the limit with the least remaining.
func firstLimit(r *result) int {
	first, _, _ := strings.Cut(r.Header.Get("x-ratelimit-limit"), ",")
	n, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return -1
	}
	return n
}

// TestEnvoyTemplateMirrorsDeploy renders testdata/envoy.yaml.tmpl with the
// values of deploy/envoy.yaml and requires the same YAML data, so the test
// bootstraps keep deploy's filter settings, rate_limits and clusters.
func TestEnvoyTemplateMirrorsDeploy(t *testing.T) {
	got, err := renderEnvoyConfig(envoyParams{
		AdminPort: 9901, ListenAddr: "0.0.0.0", IngressPort: 8080, HealthPort: 8090, AppPort: 8000, RLSPort: 8081,
		Domain: "edge", Timeout: "0.02s", FailureModeDeny: false,
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := yaml.Unmarshal(got, &g); err != nil {
		t.Fatalf("rendered template: %v", err)
	}
	if err := yaml.Unmarshal(want, &w); err != nil {
		t.Fatalf("deploy/envoy.yaml: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		gb, _ := yaml.Marshal(g)
		wb, _ := yaml.Marshal(w)
		t.Errorf("testdata/envoy.yaml.tmpl rendered with deploy's values differs from deploy/envoy.yaml:\n--- rendered ---\n%s\n--- deploy ---\n%s", gb, wb)
	}
}
