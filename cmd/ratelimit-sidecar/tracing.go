package main

import (
	"context"
	"flag"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
)

// tracingConfig is the tracing flags. The exporter's endpoint, headers,
// certificates and timeout are the standard OTEL_EXPORTER_OTLP_*
// variables, which the OpenTelemetry SDK reads itself.
type tracingConfig struct {
	enabled bool
	opts    tracing.Options
}

// addFlags registers the tracing flags on fs; parseOptions gives each its
// RLS_ environment variable, and refvars.go the reference's TRACING_*.
func (c *tracingConfig) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "tracing", false, "export OpenTelemetry spans of ShouldRateLimit and its Redis call over OTLP, to OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT); the caller's W3C traceparent is honoured")
	fs.StringVar(&c.opts.ServiceName, "tracing-service-name", config.DefaultTracingServiceName, "service.name of the spans")
	fs.StringVar(&c.opts.ServiceNamespace, "tracing-service-namespace", "", "service.namespace of the spans; empty sets none")
	fs.StringVar(&c.opts.ServiceInstanceID, "tracing-service-instance-id", "", "service.instance.id of the spans, such as the pod name; empty takes a random UUID")
	fs.Float64Var(&c.opts.SamplingRate, "tracing-sampling-rate", config.DefaultTracingSamplingRate, "fraction of the traces starting here that are sampled, 0 to 1; a call whose caller sent a traceparent follows the caller's sampling decision")
	fs.StringVar(&c.opts.Protocol, "tracing-exporter-protocol", config.DefaultTracingExporterProtocol, "OTLP protocol: http (protobuf over HTTP, to /v1/traces) or grpc")
}

// check reports bad tracing flags; with tracing off, none are read.
func (c *tracingConfig) check() error {
	if !c.enabled {
		return nil
	}
	return c.opts.Validate()
}

// newTracing returns the run's tracing, or nil when -tracing is off.
func newTracing(ctx context.Context, c *tracingConfig, log *zap.Logger) (*tracing.Tracing, error) {
	otelLogger.log.Store(log)
	if !c.enabled {
		return nil, nil
	}
	t, err := tracing.New(ctx, c.opts)
	if err != nil {
		return nil, err
	}
	log.Info("tracing: exporting spans over OTLP",
		zap.String("protocol", c.opts.Protocol), zap.String("service_name", c.opts.ServiceName),
		zap.String("service_namespace", c.opts.ServiceNamespace), zap.String("service_instance_id", t.InstanceID()),
		zap.Float64("sampling_rate", c.opts.SamplingRate))
	return t, nil
}

// otelErrorLogger sends the OpenTelemetry SDK's errors (failed exports)
// through zap, so -log-format json holds for every stderr line. The SDK has
// one error handler per process, otelLogger; newTracing points it at the
// newest run's logger.
type otelErrorLogger struct{ log atomic.Pointer[zap.Logger] }

var otelLogger = func() *otelErrorLogger {
	l := &otelErrorLogger{}
	l.log.Store(zap.NewNop())
	otel.SetErrorHandler(l)
	return l
}()

// Handle logs err.
func (l *otelErrorLogger) Handle(err error) {
	l.log.Load().Warn("tracing: "+err.Error(), zap.String("source", "opentelemetry"))
}
