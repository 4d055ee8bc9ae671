// Package tracing exports OpenTelemetry spans of the service over OTLP, as
// envoyproxy/ratelimit does with its TRACING_* variables: New builds a
// tracer provider whose exporter speaks OTLP over HTTP (protobuf) or gRPC,
// configured by the standard OTEL_EXPORTER_OTLP_* variables, which the
// OpenTelemetry SDK reads itself (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, _HEADERS, _CERTIFICATE, _TIMEOUT,
// _COMPRESSION, _INSECURE), and whose batch span processor reads
// OTEL_BSP_*. Resource attributes from OTEL_RESOURCE_ATTRIBUTES are kept;
// the service name, namespace and instance id of Options win over them.
//
// The package never touches OpenTelemetry's global tracer provider or
// propagator: the command hands Tracer to the servers that make spans, and
// installs ServerOption on its gRPC server, which puts the caller's W3C
// trace context (traceparent and tracestate in the gRPC metadata, as Envoy
// sends them) into each call's context. When tracing is off none of this
// exists: the servers are handed no tracer and the gRPC server no
// interceptor, so a decision costs exactly what it costs without the
// package.
package tracing
