package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// compatRules is the rules file the drop-in tests load: k has n per hour,
// j one per hour.
func compatRules(n string) string {
	return "domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + n + "}\n" +
		"  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
}

// refProcess is the built binary started with an environment only, as
// envoyproxy/ratelimit is started.
type refProcess struct {
	log                                    *logBuffer
	grpcAddr, httpAddr, debugAddr, metrics string
}

// startWithEnv runs the binary with no arguments and exactly vars as its
// environment, and waits until it serves. It is killed when the test ends.
func startWithEnv(t *testing.T, vars map[string]string) *refProcess {
	t.Helper()
	return startAs(t, "", nil, vars)
}

// startAs is startWithEnv with argv0 as the name the process is started
// under ("": the binary's path) and args as its arguments.
func startAs(t *testing.T, argv0 string, args []string, vars map[string]string) *refProcess {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	if argv0 != "" {
		cmd.Args[0] = argv0
	}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &refProcess{log: &logBuffer{}}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.log.Write(append(sc.Bytes(), '\n'))
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(startTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.SplitSeq(p.log.String(), "\n") {
			var raw map[string]any
			if json.Unmarshal([]byte(line), &raw) != nil || raw["msg"] != "serving" {
				continue
			}
			p.grpcAddr, _ = raw["grpc_addr"].(string)
			p.httpAddr, _ = raw["http_addr"].(string)
			p.debugAddr, _ = raw["debug_addr"].(string)
			p.metrics, _ = raw["metrics_addr"].(string)
			return p
		}
		select {
		case <-exited:
			t.Fatalf("exited before serving; log:\n%s", p.log)
		default:
		}
	}
	t.Fatalf("not serving after %v; log:\n%s", startTimeout, p.log)
	return nil
}

// refEnv is the environment both drop-in tests share: every listener on a
// free port of the loopback, by the reference's variables. REDIS_TIMEOUT is
// left to its default, the reference's 10s (see refRedisTimeout), which a
// loaded CI machine cannot miss.
func refEnv(vars map[string]string) map[string]string {
	for k, v := range map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"} {
		vars[k] = v
	}
	return vars
}

// runtimeRoot makes a RUNTIME_ROOT whose RUNTIME_SUBDIRECTORY "ratelimit"
// holds config/config.yaml, compatRules("2"), and returns both paths.
func runtimeRoot(t *testing.T) (root, file string) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte(compatRules("2")), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, file
}

// TestReferenceQuickStart starts the binary with the environment of the
// reference README's quick start: rules under RUNTIME_ROOT, Redis over TCP.
func TestReferenceQuickStart(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	root, file := runtimeRoot(t)
	p := startWithEnv(t, refEnv(map[string]string{
		"USE_STATSD": "false", "LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr,
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0",
	}))
	checkDropIn(t, p, func(n string) {
		if err := os.WriteFile(file, []byte(compatRules(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if p.metrics == "" {
		t.Errorf("USE_PROMETHEUS=true: no metrics listener")
	} else if code, body := httpGet(t, "http://"+p.metrics+"/metrics"); code != 200 || !strings.Contains(body, "ratelimit_decisions_total") {
		t.Errorf("GET %s/metrics = %d, lacks ratelimit_decisions_total", p.metrics, code)
	}
	if !strings.Contains(p.log.String(), "USE_STATSD: not used") {
		t.Errorf("no log line for USE_STATSD; log:\n%s", p.log)
	}
}

// TestReferenceIstioSample starts the binary with the environment of
// Istio's samples/ratelimit/rate-limit-service.yaml, its rules a ConfigMap
// mounted at RUNTIME_ROOT/ratelimit/config, updated as the kubelet does.
func TestReferenceIstioSample(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	version := 0
	publish := func(n string) { // the kubelet's atomic writer
		version++
		ts := filepath.Join(dir, "..ts"+string(rune('0'+version)))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "config.yaml"), []byte(compatRules(n)), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if version == 1 {
			if err := os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(dir, "config.yaml")); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("2")
	p := startWithEnv(t, refEnv(map[string]string{
		"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr, "USE_STATSD": "false",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
	}))
	checkDropIn(t, p, publish)
}

// checkDropIn checks what a deployment of the reference relies on:
// /healthcheck, gRPC answers (OK, then OVER_LIMIT), POST /json, /rlconfig
// on the debug port, a reload when the files change (edit sets k's limit),
// and /metrics.
func checkDropIn(t *testing.T, p *refProcess, edit func(n string)) {
	t.Helper()
	base := "http://" + p.httpAddr
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := httpGet(t, base+"/healthcheck")
		if code == 200 && body == "OK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthcheck = %d %q, want 200 OK; log:\n%s", code, body, p.log)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpcAddr))
	ask := func(key string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit %s: %v; log:\n%s", key, err, p.log)
		}
		return resp
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask("k").OverallCode; got != want {
			t.Errorf("ShouldRateLimit k #%d = %v, want %v", i+1, got, want)
		}
	}

	post := func() (int, string) {
		resp, err := http.Post(base+"/json", "application/json", strings.NewReader(`{"domain": "rl", "descriptors": [{"entries": [{"key": "j", "value": "v"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("POST /json = %d %s, want 200 and OK", code, body)
	}
	if code, body := post(); code != 429 || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("POST /json again = %d %s, want 429 and OVER_LIMIT", code, body)
	}

	if p.debugAddr == "" {
		t.Error("DEBUG_PORT set: no debug listener")
	} else if code, body := httpGet(t, "http://"+p.debugAddr+"/rlconfig"); code != 200 ||
		!strings.Contains(body, "rl.k: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("GET /rlconfig = %d %q, want k's limit", code, body)
	}

	edit("7")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got := ask("k").Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("k's limit not 7 10s after the rules changed; log:\n%s", p.log)
		}
	}

	// The polls above may be denied before the reload lands, and a
	// ConfigMap swap may be seen as more than one change: at least one
	// denial of k and at least the two loads.
	code, body := httpGet(t, base+"/metrics")
	overK := seriesValue(body, `ratelimit_decisions_total{domain="rl",outcome="over_limit",rule="k"}`)
	reloads := seriesValue(body, `ratelimit_reloads_total{result="ok"}`)
	if code != 200 || overK < 1 || reloads < 2 {
		t.Errorf("GET /metrics = %d, k's over_limit decisions %v (want >= 1), good reloads %v (want >= 2):\n%s", code, overK, reloads, body)
	}
}

// seriesValue returns the value of one series in a Prometheus text
// exposition, or -1 when it is missing or not a number.
func seriesValue(body, series string) float64 {
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}
