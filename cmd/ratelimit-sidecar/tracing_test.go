package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// envoyTraceparent is a sampled W3C trace context, as Envoy's tracer sends.
const (
	envoyTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	envoySpanID      = "00f067aa0ba902b7"
	envoyTraceparent = "00-" + envoyTraceID + "-" + envoySpanID + "-01"
	// A B3 trace, as Envoy's Zipkin tracer sends it.
	b3TraceID = "80f198ee56343ba864fe8b2a57d3eff7"
	b3SpanID  = "e457b5a2e4d86bd1"
)

// TestTracingFromReferenceEnv starts the binary with the reference's
// tracing variables and the SDK's OTEL_* ones only, Redis behind it, and
// checks that a traced call exports its ShouldRateLimit span, under
// Envoy's, and its Redis span, under that, to an OTLP receiver over gRPC;
// and that a call with B3 headers joins their trace.
func TestTracingFromReferenceEnv(t *testing.T) {
	t.Parallel()
	recv := otlptest.StartGRPC(t)
	redis := redistest.Start(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(goodRules(5)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startWithEnv(t, refEnv(map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr, "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
		"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "ratelimit",
		"TRACING_SERVICE_NAMESPACE": "envoy-gateway-system", "TRACING_SERVICE_INSTANCE_ID": "envoy-ratelimit-0",
		"TRACING_SAMPLING_RATE":       "1",
		"OTEL_EXPORTER_OTLP_ENDPOINT": recv.Endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50",
	}))
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpcAddr))
	for _, md := range [][]string{{"traceparent", envoyTraceparent}, {"x-b3-traceid", b3TraceID, "x-b3-spanid", b3SpanID, "x-b3-sampled", "1"}} {
		if resp, err := askK(metadata.AppendToOutgoingContext(context.Background(), md...), c); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit = %v, %v; want OK; log:\n%s", resp.GetOverallCode(), err, p.log)
		}
	}
	spans := recv.WaitSpans(t, 4, 10*time.Second)
	var call, take, b3Call otlptest.Span
	for _, s := range spans {
		switch {
		case strings.HasSuffix(s.Name, "/ShouldRateLimit") && s.TraceID() == b3TraceID:
			b3Call = s
		case strings.HasSuffix(s.Name, "/ShouldRateLimit"):
			call = s
		case s.Name == "redis take" && s.TraceID() == envoyTraceID:
			take = s
		}
		if s.Resource["service.name"] != "ratelimit" || s.Resource["service.namespace"] != "envoy-gateway-system" || s.Resource["service.instance.id"] != "envoy-ratelimit-0" {
			t.Errorf("span %q resource %v, want the TRACING_SERVICE_* values", s.Name, s.Resource)
		}
	}
	if call.Span == nil || call.TraceID() != envoyTraceID || call.ParentID() != envoySpanID {
		t.Fatalf("no ShouldRateLimit span under Envoy's %s; got %v", envoySpanID, spans)
	}
	if take.Span == nil || take.ParentID() != call.ID() {
		t.Errorf("no Redis span under the ShouldRateLimit span %s; got %v", call.ID(), spans)
	}
	// Envoy's Zipkin tracer sends B3 headers instead (the reference's #1110).
	if b3Call.Span == nil || b3Call.ParentID() != b3SpanID {
		t.Errorf("no ShouldRateLimit span under the B3 span %s; got %v", b3SpanID, spans)
	}
}

// TestTracingShutdownFlushes: spans the batcher still holds (it exports
// every 5 s by default) are exported when the sidecar shuts down.
func TestTracingShutdownFlushes(t *testing.T) {
	// Not parallel: the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT.
	recv := otlptest.StartHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint)
	s := startSidecar(t, []string{"-config", writeRules(t, goodRules(5)), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-tracing", "-tracing-service-instance-id", "i-1"}, nil)
	if _, err := askK(context.Background(), rlsv3.NewRateLimitServiceClient(dial(t, s.grpcAddr))); err != nil {
		t.Fatal(err)
	}
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("%d spans exported before shutdown; want them held by the batcher", n)
	}
	s.cancel()
	err := <-s.done
	s.done <- err // for startSidecar's cleanup
	spans := recv.Spans()
	if len(spans) != 1 || !strings.HasSuffix(spans[0].Name, "/ShouldRateLimit") || spans[0].Resource["service.instance.id"] != "i-1" {
		t.Errorf("after shutdown: spans %v, want the call's ShouldRateLimit span of instance i-1; log:\n%s", spans, s.log)
	}
	if !strings.Contains(s.log.String(), "tracing: exporting spans over OTLP") {
		t.Errorf("no startup log line for tracing; log:\n%s", s.log)
	}
}
