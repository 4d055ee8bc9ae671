package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestRunFlagBeatsEnv runs the sidecar with a good -config and a bad
// RLS_CONFIG, then with RLS_CONFIG alone.
func TestRunFlagBeatsEnv(t *testing.T) {
	t.Parallel()
	good := writeRules(t, goodRules(5))
	s := startSidecar(t, []string{"-config", good, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"},
		map[string]string{"RLS_CONFIG": "/no/such/rules.yaml", "RLS_GRPC_ADDR": "256.0.0.1:1"})
	if !strings.Contains(s.log.String(), good) {
		t.Errorf("log does not name -config %s:\n%s", good, s.log)
	}
	s2 := startSidecar(t, nil, map[string]string{"RLS_CONFIG": good, "RLS_GRPC_ADDR": "127.0.0.1:0", "RLS_HTTP_ADDR": "127.0.0.1:0"})
	if !strings.HasPrefix(s2.grpcAddr, "127.0.0.1:") || !strings.HasPrefix(s2.httpAddr, "127.0.0.1:") {
		t.Errorf("addresses %q, %q from RLS_GRPC_ADDR and RLS_HTTP_ADDR, want 127.0.0.1:port", s2.grpcAddr, s2.httpAddr)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	bad := writeRules(t, badRules)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"bad rules", []string{"-config", bad, "-grpc-addr", "127.0.0.1:0", "-http-addr", ""},
			[]string{"2 problem(s)", bad + ":4: descriptors[0].rate_limit.unit", bad + ":6: descriptors[1].rate_limt"}},
		{"missing rules", []string{"-config", filepath.Join(t.TempDir(), "none.yaml"), "-http-addr", ""}, []string{"none.yaml", "no such file"}},
		{"unknown flag", []string{"-config", bad, "-bogus"}, []string{"flag provided but not defined: -bogus"}},
		{"bad log level", []string{"-config", bad, "-log-level", "loud"}, []string{"-log-level"}},
		{"bad grpc addr", []string{"-config", writeRules(t, goodRules(1)), "-grpc-addr", "256.0.0.1:1", "-http-addr", ""}, []string{"-grpc-addr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), tt.args, env(nil), io.Discard, io.Discard)
			if err == nil {
				t.Fatalf("run(%q) = nil, want an error", tt.args)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("run(%q) = %q, want it to contain %q", tt.args, err, w)
				}
			}
		})
	}
}

// TestBinaryExitStatus checks what a shell sees: status 1 and every
// problem on stderr for bad rules, 0 and "ok" for validate of good ones.
func TestBinaryExitStatus(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	bad, good := writeRules(t, badRules), writeRules(t, goodRules(5))
	tests := []struct {
		name   string
		args   []string
		status int
		want   []string
	}{
		{"serve bad rules", []string{"-config", bad, "-grpc-addr", "127.0.0.1:0", "-http-addr", ""}, 1, []string{bad + ":4:", bad + ":6:"}},
		{"validate bad rules", []string{"validate", "-config", bad}, 1, []string{bad + ":4:", bad + ":6:"}},
		{"validate good rules", []string{"validate", "-config", good}, 0, []string{"ok: 1 domain(s) edge from 1 file(s)"}},
		{"unknown flag", []string{"-nope"}, 1, []string{"flag provided but not defined: -nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = []string{}
			out, err := cmd.CombinedOutput()
			status := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tt.status {
				t.Errorf("%s: exit status %d, want %d; output:\n%s", tt.args, status, tt.status, out)
			}
			for _, w := range tt.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("%s: output lacks %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRunServes(t *testing.T) {
	t.Parallel()
	path := writeRules(t, goodRules(5))
	s := startSidecar(t, []string{"-config", path, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-health-interval", "50ms"}, nil)
	conn := dial(t, s.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName} {
		for {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("health of %q = %v, %v; want SERVING", svc, resp, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	resp, err := askK(ctx, rlsv3.NewRateLimitServiceClient(conn))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); resp.OverallCode != rlsv3.RateLimitResponse_OK || got != 5 {
		t.Errorf("ShouldRateLimit = %v, limit %d; want OK, 5", resp.OverallCode, got)
	}

	base := "http://" + s.httpAddr
	if code, body := httpGet(t, base+"/healthz"); code != 200 {
		t.Errorf("GET /healthz = %d %q", code, body)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		code, _ := httpGet(t, base+"/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz = %d, want 200", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := httpGet(t, base+"/rules")
	var rules struct {
		Rules struct {
			Files []string `json:"files"`
		} `json:"rules"`
		LastReload      *time.Time      `json:"last_reload"`
		LastReloadError json.RawMessage `json:"last_reload_error"`
	}
	if err := json.Unmarshal([]byte(body), &rules); code != 200 || err != nil {
		t.Fatalf("GET /rules = %d, %v:\n%s", code, err, body)
	}
	if len(rules.Rules.Files) != 1 || rules.Rules.Files[0] != path || rules.LastReload == nil || string(rules.LastReloadError) != "null" {
		t.Errorf("GET /rules = %s, want files [%s], a last_reload and a null last_reload_error", body, path)
	}
	code, body = httpGet(t, base+"/metrics")
	for _, want := range []string{
		`ratelimit_decisions_total{domain="edge",outcome="ok",rule="k"} 1`,
		"ratelimit_rules_last_reload_success 1",
		`ratelimit_reloads_total{result="ok"} 1`,
		"ratelimit_store_duration_seconds_count 1",
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET /metrics = %d, lacks %q", code, want)
		}
	}
	if strings.Contains(body, "ratelimit_store_round_trips_total") {
		t.Error("GET /metrics has ratelimit_store_round_trips_total for the memory store")
	}

	// A bad edit keeps the rules and shows in /rules; a good one recovers.
	if err := os.WriteFile(path, []byte(badRules), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; {
		_, body = httpGet(t, base+"/rules")
		if strings.Contains(body, path+":4:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /rules 2s after a bad edit lacks %s:4:\n%s", path, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, err := askK(ctx, rlsv3.NewRateLimitServiceClient(conn)); err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Errorf("after a bad edit: ShouldRateLimit = %v, %v; want limit 5 still", resp, err)
	}
	if n := s.log.count("serving"); n != 1 {
		t.Errorf("%d serving lines, want 1", n)
	}
}

func TestRunUnixSocket(t *testing.T) {
	t.Parallel()
	dir := sidecartest.SocketDir(t)
	sock := filepath.Join(dir, "rls.sock") // stale sockets: internal/listen's test
	s := startSidecar(t, []string{"-config", writeRules(t, goodRules(5)), "-grpc-addr", "unix://" + sock, "-http-addr", ""}, nil)
	if s.grpcAddr != sock {
		t.Errorf("grpc_addr = %q, want %q", s.grpcAddr, sock)
	}
	conn := dial(t, "unix://"+sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := askK(ctx, rlsv3.NewRateLimitServiceClient(conn))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit over %s = %v, want OK", sock, resp.OverallCode)
	}
}

// TestRunErrorClosesListeners: run fails on a busy -debug-addr after it
// started the gRPC and HTTP listeners, and returns with both closed (a unix
// listener removes its socket file on Close).
func TestRunErrorClosesListeners(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := sidecartest.SocketDir(t)
	grpcSock, httpSock := filepath.Join(dir, "grpc.sock"), filepath.Join(dir, "http.sock")
	args := []string{"-config", writeRules(t, goodRules(5)), "-grpc-addr", "unix://" + grpcSock,
		"-http-addr", "unix://" + httpSock, "-debug-addr", busy.Addr().String()}
	if err := run(context.Background(), args, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-debug-addr") {
		t.Fatalf("run with a busy -debug-addr = %v, want a -debug-addr error", err)
	}
	for _, sock := range []string{grpcSock, httpSock} {
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after run returned: stat %s = %v, want not exist (listener closed)", sock, err)
		}
	}
}
