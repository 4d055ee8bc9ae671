//go:build e2e

package e2e

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// refSuiteTemplate is the Envoy of TestReferenceSuite; its header names the
// upstream file it mirrors.
var refSuiteTemplate = template.Must(template.ParseFiles(filepath.Join("testdata", "refsuite-envoy.yaml.tmpl")))

// refSuiteParams are refsuite-envoy.yaml.tmpl's parameters.
type refSuiteParams struct {
	RLSPort      int
	Service1Port int // "Hello World from Service 1"
	Service2Port int // "Hello World from Service 2"
}

// refStack is what envoyproxy/ratelimit's
// integration-test/docker-compose-integration-test.yml (f2fb157) starts, on
// loopback: the sidecar started as its ratelimit service starts
// /bin/ratelimit (the same environment, no arguments), Redis, the proxy
// Envoy and the two services of examples/envoy/mock.yaml.
type refStack struct {
	envoy    *envoy
	httpAddr string // the sidecar's HTTP port: /metrics
	hc       *http.Client
}

func startRefStack(t *testing.T) *refStack {
	t.Helper()
	redis := redistest.Start(t)
	root := t.TempDir()
	config := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(config, 0o755); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join("testdata", "refsuite.yaml"))
	if err == nil {
		err = os.WriteFile(filepath.Join(config, "example.yaml"), rules, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	ports, err := proctest.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	httpPort, grpcPort := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
	sc := startProcEnv(t, "ratelimit", sidecarBin, []string{
		"PATH=" + os.Getenv("PATH"),
		// The compose file's environment for the ratelimit service.
		"USE_STATSD=true", "STATSD_HOST=statsd", "STATSD_PORT=9125", "LOG_LEVEL=debug",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"RESPONSE_DYNAMIC_METADATA=true",
		// Loopback and free ports instead of the compose network's.
		"HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	})
	t.Cleanup(func() {
		if err := sc.stop(); err != nil {
			t.Errorf("ratelimit: SIGTERM: %v, want exit status 0", err)
		}
	})
	waitHTTP(t, "ratelimit /healthcheck", "http://127.0.0.1:"+httpPort+"/healthcheck", sc, time.Now().Add(startTimeout))
	s1, s2 := startService(t, "Hello World from Service 1"), startService(t, "Hello World from Service 2")
	cfg := writeEnvoyTemplate(t, envoyBin, t.TempDir(), refSuiteTemplate, refSuiteParams{
		RLSPort: ports[1], Service1Port: port(t, s1), Service2Port: port(t, s2),
	})
	return &refStack{
		envoy:    startEnvoy(t, envoyBin, "envoy-proxy", cfg),
		httpAddr: "127.0.0.1:" + httpPort,
		hc:       &http.Client{Timeout: 5 * time.Second},
	}
}

// startService starts an upstream that answers body, as examples/envoy/mock.yaml's
// direct responses do, and returns its host:port.
func startService(t *testing.T, body string) string {
	t.Helper()
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(u.Close)
	return u.Listener.Addr().String()
}

// refResponse is what a script's curl sees.
type refResponse struct {
	status  int
	body    string
	headers http.Header
}

// get sends GET path through the proxy with headers (name, value pairs).
func (s *refStack) get(t *testing.T, path string, headers ...string) refResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.envoy.Listener+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return refResponse{resp.StatusCode, string(b), resp.Header}
}

// statuses sends n requests and returns their status codes.
func (s *refStack) statuses(t *testing.T, n int, path string, headers ...string) []int {
	t.Helper()
	var out []int
	for range n {
		out = append(out, s.get(t, path, headers...).status)
	}
	return out
}

// nextWindow sleeps into the next minute, when the scripts' counters turn.
func nextWindow() {
	time.Sleep(time.Minute - time.Duration(time.Now().UnixNano()%int64(time.Minute)) + 50*time.Millisecond)
}

// TestReferenceSuite reproduces, case by case, envoyproxy/ratelimit's own
// integration suite (integration-test/scripts/*.sh at f2fb157) through a
// real Envoy 1.40 and the sidecar started as that suite starts
// /bin/ratelimit, with this project's configs that mirror the suite's
// (testdata/refsuite.yaml, testdata/refsuite-envoy.yaml.tmpl). Each case
// names its script and asserts what the script asserts, and more where the
// script's checks are loose. The cases use counters of their own and run
// side by side; those that wait for a window to turn wait for the next
// minute. scripts/refsuite.sh runs the upstream scripts themselves.
func TestReferenceSuite(t *testing.T) {
	s := startRefStack(t)
	const ok, tooMany = http.StatusOK, http.StatusTooManyRequests

	t.Run("simple-get.sh", func(t *testing.T) {
		t.Parallel()
		if r := s.get(t, "/twoheader", "foo", "test", "baz", "shady"); r.status != ok {
			t.Errorf("status %d, want 200", r.status)
		}
	})

	t.Run("trigger-ratelimit.sh", func(t *testing.T) {
		t.Parallel()
		freshWindow(time.Minute, 10*time.Second)
		// (foo: *), (baz: not-so-shady): 3 per minute.
		got := s.statuses(t, 5, "/twoheader", "foo", "pelle", "baz", "not-so-shady")
		if !slices.Equal(got, []int{ok, ok, ok, tooMany, tooMany}) {
			t.Errorf("statuses %v, want 200 200 200 429 429", got)
		}
	})

	t.Run("trigger-shadow-mode-key.sh", func(t *testing.T) {
		t.Parallel()
		freshWindow(time.Minute, 10*time.Second)
		// (foo: *), (baz: shady): 3 per minute in shadow mode: never denied.
		h := []string{"foo", "pelle-shadow", "baz", "shady"}
		got := s.statuses(t, 5, "/twoheader", h...)
		if !slices.Equal(got, []int{ok, ok, ok, ok, ok}) {
			t.Errorf("statuses %v, want 200 x5", got)
		}
		// The script means to check that x-ratelimit-remaining is 0 (its
		// message says so), but compares curl's "0\r" with "0", which never
		// fails. The reference answers a shadow limit past its limit OK with
		// limit_remaining 0, and so does the sidecar.
		if r := s.get(t, "/twoheader", h...); r.status != ok || r.headers.Get("x-ratelimit-remaining") != "0" {
			t.Errorf("6th: status %d, x-ratelimit-remaining %q; want 200 and \"0\"", r.status, r.headers.Get("x-ratelimit-remaining"))
		}
	})

	t.Run("value-included-in-stats-key-when-unspecified.sh", func(t *testing.T) {
		t.Parallel()
		freshWindow(time.Minute, 10*time.Second)
		// (unspec: *): 2 per minute, detailed_metric.
		got := s.statuses(t, 3, "/unspec", "unspec", "unspecified_value")
		if !slices.Equal(got, []int{ok, ok, tooMany}) {
			t.Errorf("statuses %v, want 200 200 429", got)
		}
		// The script reads the statsd exporter's
		// ratelimit_service_rate_limit_over_limit line that names the
		// value; the sidecar serves the same name on /metrics.
		if v, n := s.metricSum(t, "ratelimit_service_rate_limit_over_limit", "unspec_unspecified_value"); v != 1 || n != 1 {
			t.Errorf("ratelimit_service_rate_limit_over_limit{...unspec_unspecified_value...}: %d samples summing to %v, want one of 1", n, v)
		}
	})

	t.Run("replaces.sh", func(t *testing.T) {
		t.Parallel()
		freshWindow(time.Minute, 15*time.Second)
		type step struct {
			path    string
			headers []string
			want    int
		}
		four := func(foo, bar, dst string, want int) step {
			return step{"/fourheader", []string{"foo", foo, "bar", bar, "source_cluster", "proxy", "destination_cluster", dst}, want}
		}
		five := func(want int) step {
			return step{"/fiveheader", []string{"foo", "my_foo", "bar", "bkthomps", "source_cluster", "proxy", "destination_cluster", "fake", "category", "account"}, want}
		}
		two := func(foo, bar string, want int) step {
			return step{"/twoheader", []string{"foo", foo, "bar", bar}, want}
		}
		steps := []step{
			// replaces raises a limit: banned_limit (0/min) replaced by 2/min.
			two("bkthomps", "banned", tooMany),
			four("bkthomps", "banned", "mock", tooMany),
			four("bkthomps", "banned", "override", ok), four("bkthomps", "banned", "override", ok),
			four("bkthomps", "banned", "override", tooMany),
			// replaces leaves the replaced limit alone where it applies.
			four("my_foo", "bkthomps", "bkthomps", ok), four("my_foo", "bkthomps", "bkthomps", ok),
			four("my_foo", "bkthomps", "bkthomps", tooMany),
			four("my_foo", "bkthomps", "not_bkthomps", ok), four("my_foo", "bkthomps", "not_bkthomps", tooMany),
			four("my_foo", "bkthomps", "bkthomps", tooMany),
			// replaces two limits at once.
			five(ok), five(ok), five(ok), five(ok), five(tooMany),
			two("foo_2", "bkthomps", ok), two("foo_2", "bkthomps", tooMany),
			four("foo_3", "bar_3", "fake", ok), four("foo_3", "bar_3", "fake", ok), four("foo_3", "bar_3", "fake", tooMany),
			five(tooMany),
		}
		for i, st := range steps {
			if r := s.get(t, st.path, st.headers...); r.status != st.want {
				t.Errorf("step %d: GET %s %v: status %d, want %d", i, st.path, st.headers, r.status, st.want)
			}
		}
	})

	// Quota budgets, denied only when every one of the request's is spent,
	// and fresh in the next window.
	for _, tc := range []struct {
		script, path string
		want         []int
		charged      string // the metric label of the descriptor charged at stream end; "" for none
	}{
		// (service: q1) 1/min and (service: q2) 2/min, both quota_mode.
		{"quota.sh", "/quota", []int{ok, ok, tooMany}, ""},
		// (service: t2) 2/min, checked with hits_addend 0 and charged 1 when
		// the stream is done: the check passes until the count is past 2.
		{"token-quota.sh", "/tokenquota", []int{ok, ok, ok, tooMany}, "service_t2"},
	} {
		t.Run(tc.script, func(t *testing.T) {
			t.Parallel()
			freshWindow(time.Minute, 10*time.Second)
			var got []int
			for i := range tc.want {
				r := s.get(t, tc.path)
				got = append(got, r.status)
				if tc.charged != "" && r.status == ok {
					s.waitCharges(t, tc.charged, i+1)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("statuses %v, want %v", got, tc.want)
			}
			nextWindow()
			if r := s.get(t, tc.path); r.status != ok {
				t.Errorf("in the next window: status %d, want 200", r.status)
			}
		})
	}

	t.Run("multiservice-tokenquota.sh", func(t *testing.T) {
		t.Parallel()
		freshWindow(time.Minute, 10*time.Second)
		// (service: m1) 1/min and (service: m2) 2/min, checked with no hits;
		// the response's metadata names the first service with quota left
		// and Envoy routes to it; the stream-done charge goes to the
		// service that served.
		want := []string{"Service 1", "Service 1", "Service 2", "Service 2", "Service 2"}
		for i, w := range want {
			r := s.get(t, "/multiservice-tokenquota", "request-no", strconv.Itoa(i+1))
			if r.status != ok || !strings.Contains(r.body, "from "+w) {
				t.Errorf("request %d: status %d, body %q; want 200 from %s", i+1, r.status, r.body, w)
			}
			s.waitCharges(t, `key1="service_m`, i+1)
		}
		if r := s.get(t, "/multiservice-tokenquota", "request-no", "6"); r.status != tooMany {
			t.Errorf("request 6: status %d, body %q; want 429", r.status, r.body)
		}
		nextWindow()
		if r := s.get(t, "/multiservice-tokenquota", "request-no", "7"); r.status != ok || !strings.Contains(r.body, "from Service 1") {
			t.Errorf("request 7, next window: status %d, body %q; want 200 from Service 1", r.status, r.body)
		}
	})
}

// metricSum returns the sum of the samples of metric on the sidecar's
// /metrics whose labels hold label, and how many there were.
func (s *refStack) metricSum(t *testing.T, metric, label string) (sum float64, n int) {
	t.Helper()
	resp, err := s.hc.Get("http://" + s.httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, metric+"{") && strings.Contains(line, label) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			sum, n = sum+v, n+1
		}
	}
	return sum, n
}

// waitCharges waits until the sidecar has counted n hits in all on the
// descriptors whose metric labels hold label: Envoy sends a stream-done
// charge after the response, so the next request could otherwise be
// checked before the last one was charged (a race the scripts run into).
func (s *refStack) waitCharges(t *testing.T, label string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := s.metricSum(t, "ratelimit_service_rate_limit_total_hits", label)
		if got >= float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v hits counted on %s after 5s, want %d", got, label, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
