package rlqs

import (
	"context"
	"strings"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
)

// spanName names the span of one report: the stream's gRPC method, then
// "/report", since one stream carries many reports and each is the unit of
// work (the stream's own span, if the gRPC server makes one, lasts as
// long as the connection).
var spanName = strings.TrimPrefix(rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName, "/") + "/report"

// The span's attributes. Bucket ids are not recorded: their values are
// often user identities, as descriptor values are for ShouldRateLimit.
var (
	attrRPCSystem  = attribute.String("rpc.system", "grpc")
	attrRPCService = attribute.String("rpc.service", rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName)
	attrRPCMethod  = attribute.String("rpc.method", "StreamRateLimitQuotas")
)

// Attribute keys of the report span; ratelimit.domain is ShouldRateLimit's.
const (
	keyDomain  = attribute.Key("ratelimit.domain")
	keyUsages  = attribute.Key("rlqs.usages")
	keyActions = attribute.Key("rlqs.actions")
)

// tracedReport is handle inside a span, the child of the stream's context,
// whose context the store and the ledger get.
func (st *stream) tracedReport(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	// Internal, not server: the stream's server span (from the gRPC
	// server's instrumentation, if any) is this one's parent.
	ctx, span := st.s.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindInternal))
	resp, err := st.handle(ctx, m)
	if span.IsRecording() {
		span.SetAttributes(attrRPCSystem, attrRPCService, attrRPCMethod, keyDomain.String(st.domain),
			keyUsages.Int(len(m.GetBucketQuotaUsages())), keyActions.Int(len(resp.GetBucketAction())))
		if err != nil {
			span.SetStatus(codes.Error, status.Convert(grpcError(err)).Message())
		}
	}
	span.End()
	return resp, err
}
