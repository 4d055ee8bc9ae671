package rlqs_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// spanStore records whether each Take was handed a span.
type spanStore struct {
	window.Store
	seen chan trace.SpanContext
}

func (s *spanStore) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	s.seen <- trace.SpanContextFromContext(ctx)
	return s.Store.Take(ctx, now, reqs, res)
}

// TestReportSpan: with a tracer, each report is one span that names the
// domain, the usages and the actions sent, whose context the store is
// handed; a report that ends the stream ends its span with an error.
func TestReportSpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	store := &spanStore{Store: window.NewMemory(), seen: make(chan trace.SpanContext, 16)}
	f := newFixture(t, store, func(o *rlqs.Options) { o.Tracer = tp.Tracer("test") })
	c := f.open(t)
	c.report(use("user=a", 0, 1, 0), use("other=b", 0, 1, 0), use("", 0, 1, 0))
	f.advance(10 * time.Second)                     // so the report is answered, not kept
	c.send("", use("user=a", 10*time.Second, 1, 0)) // no domain is fine after the first
	c.recv()
	c2 := f.open(t)
	c2.send("", use("user=a", 0, 1, 0))
	c2.end()
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (one per report)", len(spans))
	}
	want := map[attribute.Key]attribute.Value{
		"ratelimit.domain": attribute.StringValue("edge"),
		"rlqs.usages":      attribute.IntValue(3),
		"rlqs.actions":     attribute.IntValue(2),
	}
	first := spans[0]
	if first.Name() != "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas/report" {
		t.Errorf("span name %q", first.Name())
	}
	for _, kv := range first.Attributes() {
		if w, ok := want[kv.Key]; ok && w != kv.Value {
			t.Errorf("%s = %v, want %v", kv.Key, kv.Value.String(), w.String())
		}
		delete(want, kv.Key)
	}
	if len(want) > 0 {
		t.Errorf("attributes missing: %v", want)
	}
	if got := <-store.seen; got.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("the store got span %v, want the report's %v", got.SpanID(), first.SpanContext().SpanID())
	}
	if st := spans[2].Status(); st.Code != codes.Error {
		t.Errorf("report without a domain: span status %v, want Error", st)
	}
}
