package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
)

// envoyGatewayEnv is the environment Envoy Gateway's rate limit
// Deployment sets, pointed at the loopback, without the TLS variables
// (TestEnvoyGatewayDeployment has them), and with reconnections spaced for
// a test.
func envoyGatewayEnv(xdsAddr, redisAddr, forceStart string) map[string]string {
	return refEnv(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xdsAddr, "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": forceStart,
		"REDIS_SOCKET_TYPE":                  "tcp", "REDIS_URL": redisAddr,
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms",
	})
}

const egListener = "default/eg/http"

// askEG asks once for user on Envoy Gateway's route of egListener.
func askEG(t *testing.T, c rlsv3.RateLimitServiceClient, user string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	var es []*rlv3.RateLimitDescriptor_Entry
	for _, e := range xdstest.EnvoyGatewayEntries(user) {
		es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egListener, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: es}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s) = %v", user, err)
	}
	return resp.OverallCode
}

// wantAllowed asks for user until the first OVER_LIMIT and checks that
// it came after n answers OK.
func wantAllowed(t *testing.T, c rlsv3.RateLimitServiceClient, user string, n int) {
	t.Helper()
	for i := range n + 1 {
		code := askEG(t, c, user)
		if want := i < n; (code == rlsv3.RateLimitResponse_OK) != want {
			t.Fatalf("request %d of %s = %v, want OK for the first %d only", i+1, user, code, n)
		}
	}
}

// waitHealthcheck waits until GET /healthcheck answers code.
func waitHealthcheck(t *testing.T, p *refProcess, code int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, _ := httpGet(t, "http://"+p.httpAddr+"/healthcheck")
		if got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthcheck = %d, want %d; log:\n%s", got, code, p.log)
		}
	}
}

// waitLog waits until the sidecar has logged a line with msg.
func waitLog(t *testing.T, p *refProcess, msg string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); p.log.count(msg) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q after 10s; log:\n%s", msg, p.log)
		}
	}
}

// rulesStatus returns GET /rules.
func rulesStatus(t *testing.T, p *refProcess) map[string]any {
	t.Helper()
	_, body := httpGet(t, "http://"+p.httpAddr+"/rules")
	var out map[string]any
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET /rules: %v: %s", err, body)
	}
	return out
}

// TestReferenceEnvoyGateway starts the built binary with the environment
// Envoy Gateway sets (FORCE_START_WITHOUT_INITIAL_CONFIG=true) and an
// xDS server with a snapshot cache, as its rate limit runner runs: the
// sidecar is healthy before a push, each push is served within seconds,
// a bad one is NACKed while the last good rules serve, and the xDS server
// restarting changes nothing until its next push.
func TestReferenceEnvoyGateway(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	srv := xdstest.Start(t, "envoy-ratelimit")
	p := startWithEnv(t, envoyGatewayEnv(srv.Addr, redis.Addr, "true"))
	waitHealthcheck(t, p, 200) // before any push
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpcAddr))
	if code := askEG(t, c, "before"); code != rlsv3.RateLimitResponse_OK {
		t.Errorf("before any push: %v, want OK", code)
	}

	v1 := srv.Push(xdstest.EnvoyGatewayConfig(egListener, 2, rlsconfv3.RateLimitUnit_HOUR))
	srv.WaitAck(v1, 10*time.Second)
	wantAllowed(t, c, "alice", 2)
	st := rulesStatus(t, p)
	x, _ := st["xds"].(map[string]any)
	if x["version"] != v1 || x["connected"] != true {
		t.Errorf("GET /rules xds = %v, want version %s, connected", x, v1)
	}
	if rs, _ := st["rules"].(map[string]any); !strings.Contains(toJSON(rs), `"file":"xds:`+egListener+`"`) {
		t.Errorf("GET /rules rules = %s, want the domain's file xds:%s", toJSON(rs), egListener)
	}

	v2 := srv.Push(xdstest.EnvoyGatewayConfig(egListener, 5, rlsconfv3.RateLimitUnit_UNKNOWN))
	if msg := srv.WaitNack(v2, 10*time.Second); !strings.Contains(msg, "rate_limit.unit: missing") {
		t.Errorf("NACK error_detail = %q, want the problem", msg)
	}
	wantAllowed(t, c, "bob", 2) // the last good rules
	if st := rulesStatus(t, p); st["last_reload_error"] == nil {
		t.Errorf("GET /rules = %v, want the NACK as last_reload_error", st)
	}

	srv.Stop()
	waitLog(t, p, "xDS stream ended; the last good rules keep serving")
	wantAllowed(t, c, "carol", 2)
	waitHealthcheck(t, p, 200)
	srv2 := xdstest.StartAt(t, srv.Addr, "envoy-ratelimit")
	v3 := srv2.Push(xdstest.EnvoyGatewayConfig(egListener, 3, rlsconfv3.RateLimitUnit_HOUR))
	srv2.WaitAck(v3, 10*time.Second)
	wantAllowed(t, c, "dave", 3)
	if !strings.Contains(p.log.String(), "xDS stream ended") {
		t.Errorf("no log line of the stream ending; log:\n%s", p.log)
	}
}

// TestXDSNotServingBeforeFirstPush: without
// FORCE_START_WITHOUT_INITIAL_CONFIG, health is NOT_SERVING until the
// first good push; a bad first push changes nothing.
func TestXDSNotServingBeforeFirstPush(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	srv := xdstest.Start(t, "envoy-ratelimit")
	p := startWithEnv(t, envoyGatewayEnv(srv.Addr, redis.Addr, "false"))
	conn := dial(t, p.grpcAddr)
	hc := healthpb.NewHealthClient(conn)
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	waitLog(t, p, "store reachable: not serving until the first rules come")
	v := srv.Push(xdstest.EnvoyGatewayConfig(egListener, 5, rlsconfv3.RateLimitUnit_UNKNOWN))
	srv.WaitNack(v, 10*time.Second)
	if got, _ := httpGet(t, "http://"+p.httpAddr+"/healthcheck"); got != 500 {
		t.Errorf("GET /healthcheck before a good push = %d, want 500", got)
	}
	if got := health(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before a good push = %v, want NOT_SERVING", got)
	}
	srv.Push(xdstest.EnvoyGatewayConfig(egListener, 1, rlsconfv3.RateLimitUnit_MINUTE))
	waitHealthcheck(t, p, 200)
	if got := health(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after a good push = %v, want SERVING", got)
	}
	wantAllowed(t, rlsv3.NewRateLimitServiceClient(conn), "erin", 1)
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestXDSTLSRefused: TLS to the xDS server is asked for and its files
// cannot be loaded: the start fails naming the variable, never connecting
// in plaintext.
func TestXDSTLSRefused(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "ca.crt")
	var stderr strings.Builder
	err := run(context.Background(), nil, env(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": missing,
		"RLS_GRPC_ADDR":                     "127.0.0.1:0", "RLS_HTTP_ADDR": "127.0.0.1:0"}), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT") {
		t.Fatalf("run = %v, want a start error naming CONFIG_GRPC_XDS_SERVER_TLS_CACERT", err)
	}
	if strings.Contains(stderr.String(), `"msg":"serving"`) {
		t.Errorf("served although TLS to the xDS server could not be set up:\n%s", stderr.String())
	}
}

// TestXDSDomainDefaults: the -xds-domain-defaults file sets what the proto
// cannot carry, here failure_mode, seen in GET /rules.
func TestXDSDomainDefaults(t *testing.T) {
	t.Parallel()
	srv := xdstest.Start(t, "n")
	path := filepath.Join(t.TempDir(), "defaults.yaml")
	if err := os.WriteFile(path, []byte("domains:\n  \"*\":\n    failure_mode: allow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, []string{"-config-type", "grpc-xds-sotw", "-xds-server-url", srv.Addr, "-xds-node-id", "n",
		"-xds-domain-defaults", path, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, nil)
	srv.WaitAck(srv.Push(xdstest.EnvoyGatewayConfig(egListener, 1, rlsconfv3.RateLimitUnit_MINUTE)), 10*time.Second)
	_, body := httpGet(t, "http://"+s.httpAddr+"/rules")
	if !strings.Contains(body, `"failure_mode": "allow"`) {
		t.Errorf("GET /rules = %s, want failure_mode allow from the defaults", body)
	}
	err := run(context.Background(), []string{"-config-type", "grpc_xds_sotw", "-xds-domain-defaults", path + ".missing",
		"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-xds-domain-defaults") {
		t.Errorf("run with a missing defaults file = %v, want an error naming -xds-domain-defaults", err)
	}
}

func TestValidateXDS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yamlForm := write("eg.yaml", "name: l\ndomain: l\ndescriptors:\n  - key: route\n    value: route\n    descriptors:\n      - key: user\n        rate_limit: {unit: HOUR, requests_per_unit: 5}\n")
	jsonForm := write("eg.json", `{"name": "m", "domain": "m", "descriptors": [{"key": "k", "rateLimit": {"unit": "YEAR", "requestsPerUnit": 1}, "quotaMode": true}]}`)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: b\ndomain: b\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string // output, or the error's substring after "error: "
	}{
		{[]string{"-config-format", "xds", "-config", yamlForm}, "ok: 1 domain(s) l from 1 file(s)\n"},
		{[]string{"-config", jsonForm}, "ok: 1 domain(s) m from 1 file(s)\n"},
		{[]string{"-config", dir}, "ok: 2 domain(s) l, m from 2 file(s)\n"},
		{[]string{"-config", bad}, bad + ": descriptors[0].rate_limit.unit: missing"},
		{[]string{"-config-format", "file", "-config", yamlForm}, `name: unknown field "name"`},
		{[]string{"-config-format", "proto", "-config", yamlForm}, "error: validate: -config-format"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"validate"}, tt.args...), env(nil), &out, io.Discard)
		got := out.String()
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("validate %q = %q, want %q", tt.args, got, tt.want)
		}
	}
}
