package tracing

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The exporter protocols of Options.Protocol.
const (
	ProtocolHTTP = "http" // OTLP over HTTP with protobuf bodies, to /v1/traces
	ProtocolGRPC = "grpc"
)

// DefaultServiceName is the service.name of the spans when
// Options.ServiceName is empty: envoyproxy/ratelimit's TRACING_SERVICE_NAME
// default.
const DefaultServiceName = "RateLimit"

// scope names the instrumentation that makes the spans.
const scope = "github.com/ratelimit-sidecar/ratelimit-sidecar"

// Options configure tracing.
type Options struct {
	// ServiceName is the resource's service.name; default
	// DefaultServiceName.
	ServiceName string
	// ServiceNamespace is its service.namespace; empty sets none.
	ServiceNamespace string
	// ServiceInstanceID is its service.instance.id; empty takes a random
	// version 4 UUID, as envoyproxy/ratelimit does. A pod name is a good
	// choice.
	ServiceInstanceID string
	// SamplingRate is the fraction of traces that start here which are
	// sampled, from 0 (none) to 1 (all), by trace id. A call whose caller
	// sent a trace context follows the caller's decision whatever the
	// rate (parent-based sampling, as envoyproxy/ratelimit does), so
	// Envoy's own sampling is kept end to end.
	SamplingRate float64
	// Protocol is ProtocolHTTP (the default when empty) or ProtocolGRPC.
	Protocol string
}

// Validate reports every bad field at once.
func (o Options) Validate() error {
	var errs []error
	if math.IsNaN(o.SamplingRate) || o.SamplingRate < 0 || o.SamplingRate > 1 {
		errs = append(errs, fmt.Errorf("tracing: sampling rate %v: want 0 to 1", o.SamplingRate))
	}
	switch o.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
	default:
		errs = append(errs, fmt.Errorf("tracing: exporter protocol %q: want %s or %s", o.Protocol, ProtocolHTTP, ProtocolGRPC))
	}
	return errors.Join(errs...)
}

// Tracing is a tracer provider that batches spans and exports them over
// OTLP. It is safe for concurrent use.
type Tracing struct {
	tp       *sdktrace.TracerProvider
	tracer   trace.Tracer
	instance string
}

// New validates o and returns a Tracing whose exporter is configured by the
// OTEL_EXPORTER_OTLP_* variables. It does not connect: an unreachable
// collector costs failed exports (reported to OpenTelemetry's error
// handler), never a failed start. Shutdown flushes and stops it.
func New(ctx context.Context, o Options) (*Tracing, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.ServiceName == "" {
		o.ServiceName = DefaultServiceName
	}
	if o.ServiceInstanceID == "" {
		o.ServiceInstanceID = newUUID()
	}
	attrs := []resource.Option{
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME: ours below win
		resource.WithTelemetrySDK(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(o.ServiceName), semconv.ServiceInstanceID(o.ServiceInstanceID)),
	}
	if o.ServiceNamespace != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceNamespace(o.ServiceNamespace)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	var client otlptrace.Client
	if o.Protocol == ProtocolGRPC {
		client = otlptracegrpc.NewClient()
	} else {
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)
	return &Tracing{tp: tp, tracer: tp.Tracer(scope), instance: o.ServiceInstanceID}, nil
}

// Tracer returns the tracer the servers make their spans with.
func (t *Tracing) Tracer() trace.Tracer { return t.tracer }

// InstanceID returns the service.instance.id of the spans: Options'
// ServiceInstanceID, or the UUID New chose.
func (t *Tracing) InstanceID() string { return t.instance }

// Shutdown exports the spans still buffered and stops the exporter,
// within ctx. Spans ended after it are dropped. Calls after the first do
// nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// newUUID returns a random version 4 UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
