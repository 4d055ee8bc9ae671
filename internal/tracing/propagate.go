package tracing

import (
	"context"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// propagator reads the caller's trace context as envoyproxy/ratelimit does
// since its #1110: W3C traceparent and tracestate (Envoy's OpenTelemetry
// tracer), then B3 in either encoding (Envoy's Zipkin tracer sends the
// x-b3-* headers; b3 is the single-header form), then W3C baggage. Each
// reads its own headers and keeps the context it was given when they are
// absent or malformed, so a call that carries both W3C and B3 headers
// joins the B3 trace, the last one read, as the reference's composite does.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{})

// ServerOption returns the gRPC server option that honours the caller's
// trace context: a unary interceptor that reads it from the call's
// metadata (see propagator) into the context the handler gets. It makes
// no span itself; the handler's span (see envoyrls.Options.Tracer) is then
// the caller's span's child. A call without a valid trace context starts a
// new trace.
func (t *Tracing) ServerOption() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(extractTraceContext)
}

func extractTraceContext(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(propagator.Extract(ctx, metadataCarrier{ctx}), req)
}

// metadataCarrier reads a propagator's keys from the incoming metadata
// without copying it.
type metadataCarrier struct{ ctx context.Context }

// Get returns the first value of key, or "".
func (c metadataCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set does nothing: the carrier only reads.
func (metadataCarrier) Set(string, string) {}

// Keys returns the metadata's keys.
func (c metadataCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
