package envoyrls

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// spanStore records the span context each Take was handed.
type spanStore struct {
	window.Store
	seen []trace.SpanContext
}

func (s *spanStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	return s.Store.Take(ctx, now, reqs, res)
}

// TestShouldRateLimitSpan: with a tracer, each call is one server span,
// the child of the span its context carries, whose context the store is
// handed; it names the domain and the outcome, and an invalid request
// ends it with an error status.
func TestShouldRateLimitSpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	store := &spanStore{Store: window.NewMemory()}
	f := newFixture(t, store, testRules, func(o *Options) { o.Tracer = tp.Tracer("test") })

	ctx, parent := tp.Tracer("test").Start(context.Background(), "envoy")
	if _, err := f.srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "a"), desc("zero", "z")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api"}); err == nil {
		t.Fatal("ShouldRateLimit(no descriptors) = nil error")
	}
	parent.End()

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans ended, want 3 (two calls, the parent)", len(spans))
	}
	ok, bad := spans[0], spans[1]
	for _, s := range []sdktrace.ReadOnlySpan{ok, bad} {
		if s.Name() != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || s.SpanKind() != trace.SpanKindServer {
			t.Errorf("span %q kind %v, want the method's name, server kind", s.Name(), s.SpanKind())
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q parent %v, want %v", s.Name(), s.Parent().SpanID(), parent.SpanContext().SpanID())
		}
	}
	if len(store.seen) != 1 || store.seen[0].SpanID() != ok.SpanContext().SpanID() {
		t.Errorf("store handed spans %v, want the call's %v", store.seen, ok.SpanContext().SpanID())
	}
	for k, want := range map[attribute.Key]string{"ratelimit.domain": "api", "ratelimit.descriptors": "2", "ratelimit.overall_code": "OVER_LIMIT", "rpc.grpc.status_code": "0", "rpc.method": "ShouldRateLimit"} {
		if got := attr(ok, k); got != want {
			t.Errorf("span attribute %s = %q, want %q", k, got, want)
		}
	}
	if ok.Status().Code != codes.Unset {
		t.Errorf("allowed call's span status %v, want unset", ok.Status())
	}
	if bad.Status().Code != codes.Error || attr(bad, "rpc.grpc.status_code") != "3" {
		t.Errorf("invalid call's span status %v, grpc code %s; want Error, 3 (InvalidArgument)", bad.Status(), attr(bad, "rpc.grpc.status_code"))
	}
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}
