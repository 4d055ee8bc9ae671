package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap/zaptest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestAppServeShutdown builds an app, serves until SERVING, then cancels:
// serve returns nil, readiness is gone for good and the listener is closed.
func TestAppServeShutdown(t *testing.T) {
	t.Parallel()
	o, err := parseOptions("test", []string{"-config", writeRules(t, goodRules(5)), "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-health-interval", "50ms"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(context.Background(), o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.serve(ctx, make(chan os.Signal)) }()

	hc := healthpb.NewHealthClient(dial(t, a.grpcLis.Addr().String()))
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING && a.health.ready.Ready() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health = %v, %v, Ready() = %v 5s after serve; want SERVING and true", resp, err, a.health.ready.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve = %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return 10s after cancel")
	}
	if a.health.ready.Ready() {
		t.Error("Ready() after shutdown = true, want false")
	}
	if c, err := a.grpcLis.Accept(); err == nil {
		c.Close()
		t.Error("gRPC listener still accepts after shutdown")
	}
}

// TestResponseTimeMetric: each ShouldRateLimit call over gRPC, allowed or
// denied, counts once in the reference's ratelimit_service_total_requests
// and response_time; a /json call does not, as in the reference. With
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true the histogram says it
// counts milliseconds (internal/metrics TestReferenceCallMetrics checks
// the values).
func TestResponseTimeMetric(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		unit string
	}{
		{"seconds", nil, "in seconds."},
		{"milliseconds", map[string]string{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}, "in milliseconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startSidecar(t, []string{"-config", writeRules(t, goodRules(1)), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, tt.env)
			c := rlsv3.NewRateLimitServiceClient(dial(t, s.grpcAddr))
			for _, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				if resp, err := askK(context.Background(), c); err != nil || resp.OverallCode != want {
					t.Fatalf("ShouldRateLimit = %v, %v; want %v", resp.GetOverallCode(), err, want)
				}
			}
			resp, err := http.Post("http://"+s.httpAddr+"/json", "application/json",
				strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			_, body := httpGet(t, "http://"+s.httpAddr+"/metrics")
			calls := seriesValue(body, `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`)
			timed := seriesValue(body, `ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`)
			if calls != 2 || timed != 2 {
				t.Errorf("total_requests %v, response_time count %v; want 2 and 2 (the gRPC calls, not /json)", calls, timed)
			}
			if !strings.Contains(body, "# HELP ratelimit_service_response_time_seconds") || !strings.Contains(body, tt.unit) {
				t.Errorf("/metrics lacks the response time help %q:\n%s", tt.unit, body)
			}
		})
	}
}
