package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ServerOption returns the gRPC server option that honours the caller's
// trace context: a unary interceptor that reads W3C traceparent and
// tracestate from the call's metadata (Envoy's OpenTelemetry tracer sends
// them on its rate-limit calls) into the context the handler gets. It
// makes no span itself; the handler's span (see envoyrls.Options.Tracer)
// is then the caller's span's child. A call without a valid traceparent
// starts a new trace.
func (t *Tracing) ServerOption() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(extractTraceContext)
}

func extractTraceContext(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(propagation.TraceContext{}.Extract(ctx, metadataCarrier{ctx}), req)
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
