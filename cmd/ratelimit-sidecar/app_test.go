package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

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
