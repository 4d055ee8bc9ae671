package tracing

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/otlptest"
)

// A B3 trace, as Envoy's Zipkin tracer sends it.
const (
	b3TraceID = "80f198ee56343ba864fe8b2a57d3eff7"
	b3SpanID  = "e457b5a2e4d86bd1"
)

// TestExtractTraceContext: the trace context the handler gets from each
// header shape Envoy's tracers send, alone and together.
func TestExtractTraceContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		md        []string // key, value pairs
		traceID   string   // "" when no remote span is wanted
		spanID    string
		sampled   bool
		baggageOf string // a member the baggage must hold, "" for none
	}{
		{"none", nil, "", "", false, ""},
		{"w3c", []string{"traceparent", sampledParent}, traceID, parentID, true, ""},
		{"b3 multi", []string{"x-b3-traceid", b3TraceID, "x-b3-spanid", b3SpanID, "x-b3-sampled", "1"}, b3TraceID, b3SpanID, true, ""},
		{"b3 multi not sampled", []string{"x-b3-traceid", b3TraceID, "x-b3-spanid", b3SpanID, "x-b3-sampled", "0"}, b3TraceID, b3SpanID, false, ""},
		{"b3 debug flag", []string{"x-b3-traceid", b3TraceID, "x-b3-spanid", b3SpanID, "x-b3-flags", "1"}, b3TraceID, b3SpanID, true, ""},
		{"b3 single", []string{"b3", b3TraceID + "-" + b3SpanID + "-1"}, b3TraceID, b3SpanID, true, ""},
		{"b3 64-bit trace id", []string{"x-b3-traceid", b3TraceID[16:], "x-b3-spanid", b3SpanID, "x-b3-sampled", "1"}, "0000000000000000" + b3TraceID[16:], b3SpanID, true, ""},
		{"w3c and b3: b3 read last", []string{"traceparent", sampledParent, "x-b3-traceid", b3TraceID, "x-b3-spanid", b3SpanID, "x-b3-sampled", "1"}, b3TraceID, b3SpanID, true, ""},
		{"w3c and bad b3: w3c kept", []string{"traceparent", sampledParent, "x-b3-traceid", "zz", "x-b3-spanid", b3SpanID}, traceID, parentID, true, ""},
		{"baggage", []string{"traceparent", sampledParent, "baggage", "tenant=acme"}, traceID, parentID, true, "tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tt.md...))
			var got context.Context
			if _, err := extractTraceContext(ctx, nil, nil, func(ctx context.Context, _ any) (any, error) { got = ctx; return nil, nil }); err != nil {
				t.Fatal(err)
			}
			sc := trace.SpanContextFromContext(got)
			if tt.traceID == "" {
				if sc.IsValid() {
					t.Errorf("span context %v, want none", sc)
				}
				return
			}
			if sc.TraceID().String() != tt.traceID || sc.SpanID().String() != tt.spanID || sc.IsSampled() != tt.sampled || !sc.IsRemote() {
				t.Errorf("span context trace %s span %s sampled %v remote %v, want %s %s %v true",
					sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.IsRemote(), tt.traceID, tt.spanID, tt.sampled)
			}
			if m := baggage.FromContext(got).Member(tt.baggageOf); tt.baggageOf != "" && m.Value() == "" {
				t.Errorf("baggage %v, want member %s", baggage.FromContext(got), tt.baggageOf)
			}
		})
	}
}

// TestB3JoinsTrace: a call that carries only Envoy's Zipkin (B3) headers
// exports its ShouldRateLimit span into the B3 trace, under the B3 span,
// to an OTLP receiver, as envoyproxy/ratelimit's since its #1110.
func TestB3JoinsTrace(t *testing.T) {
	// Not parallel: the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT.
	recv := otlptest.StartGRPC(t)
	tr := newTracing(t, recv.Endpoint, Options{SamplingRate: 0, Protocol: ProtocolGRPC})
	c := serve(t, tr)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-b3-traceid", b3TraceID, "x-b3-spanid", b3SpanID, "x-b3-sampled", "1")
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit = %v, %v; want OK", resp.GetOverallCode(), err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var call otlptest.Span
	for _, s := range recv.Spans() {
		if strings.HasSuffix(s.Name, "/ShouldRateLimit") {
			call = s
		}
		if s.TraceID() != b3TraceID {
			t.Errorf("span %q in trace %s, want the B3 trace %s", s.Name, s.TraceID(), b3TraceID)
		}
	}
	// Sampling rate 0: the span exists only because B3 said sampled.
	if call.Span == nil || call.ParentID() != b3SpanID {
		t.Fatalf("no ShouldRateLimit span under the B3 span %s; got %v", b3SpanID, recv.Spans())
	}
}
