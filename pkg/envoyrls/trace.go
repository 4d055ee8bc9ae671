package envoyrls

import (
	"context"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
)

// spanName is the ShouldRateLimit span's name: the gRPC method, as
// OpenTelemetry's RPC conventions name a server span.
var spanName = strings.TrimPrefix(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, "/")

// The span's attributes. The request's descriptors are not recorded:
// their values are often user identities (API keys, addresses), and a
// trace backend is not where those should go.
var (
	attrRPCSystem  = attribute.String("rpc.system", "grpc")
	attrRPCService = attribute.String("rpc.service", rlsv3.RateLimitService_ServiceDesc.ServiceName)
	attrRPCMethod  = attribute.String("rpc.method", "ShouldRateLimit")
)

// Attribute keys of the ShouldRateLimit span.
const (
	keyDomain      = attribute.Key("ratelimit.domain")
	keyDescriptors = attribute.Key("ratelimit.descriptors")
	keyOverall     = attribute.Key("ratelimit.overall_code")
	keyGRPCStatus  = attribute.Key("rpc.grpc.status_code")
)

// tracedDecide is decide inside a server span: a child of whatever span
// ctx carries (the caller's, from its traceparent), whose context the store
// gets, so its spans are this one's children. The span records the domain,
// the number of descriptors, the overall code and, for an error, its gRPC
// status.
func (s *Server) tracedDecide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, span := s.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindServer))
	resp, err := s.decide(ctx, req)
	if span.IsRecording() {
		span.SetAttributes(attrRPCSystem, attrRPCService, attrRPCMethod,
			keyDomain.String(req.GetDomain()), keyDescriptors.Int(len(req.GetDescriptors())))
		if err != nil {
			st := status.Convert(err)
			span.SetAttributes(keyGRPCStatus.Int(int(st.Code())))
			span.SetStatus(codes.Error, st.Message())
		} else {
			span.SetAttributes(keyOverall.String(resp.GetOverallCode().String()), keyGRPCStatus.Int(0))
		}
	}
	span.End()
	return resp, err
}
