// Package otlptest receives OpenTelemetry trace exports in tests, as a
// collector would: StartGRPC serves OTLP's TraceService over gRPC and
// StartHTTP its /v1/traces over HTTP (protobuf bodies), each on a free port
// of the loopback, stopped in tb.Cleanup. A Receiver keeps every span it
// was sent with its resource's attributes. It is safe for concurrent use.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver collects the spans exported to it.
type Receiver struct {
	// Endpoint is the receiver's URL, for OTEL_EXPORTER_OTLP_ENDPOINT:
	// http://127.0.0.1:port.
	Endpoint string

	mu    sync.Mutex
	spans []Span
}

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string // string values only
}

// TraceID is the span's trace id in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.Span.TraceId) }

// ID is the span's id in hex.
func (s Span) ID() string { return hex.EncodeToString(s.SpanId) }

// ParentID is its parent's span id in hex, "" for a root span.
func (s Span) ParentID() string { return hex.EncodeToString(s.ParentSpanId) }

// Attr returns the span's attribute key as a string (its string, int,
// double or bool value in Go's formatting), or "" when it has none.
func (s Span) Attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return valueString(kv.Value)
		}
	}
	return ""
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return ""
}

// Spans returns the spans received so far, in order of arrival.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitSpans waits up to timeout until n spans have arrived and returns
// every span received; it fails the test on timeout.
func (r *Receiver) WaitSpans(tb testing.TB, n int, timeout time.Duration) []Span {
	tb.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		if spans := r.Spans(); len(spans) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d spans received after %v, want %d: %v", len(r.Spans()), timeout, n, r.Spans())
		}
	}
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = valueString(kv.Value)
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Span: sp, Resource: res})
			}
		}
	}
}

// StartGRPC starts a receiver of OTLP over gRPC.
func StartGRPC(tb testing.TB) *Receiver {
	tb.Helper()
	lis := listen(tb)
	r := &Receiver{Endpoint: "http://" + lis.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceService{r: r})
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	return r
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// StartHTTP starts a receiver of OTLP over HTTP, protobuf bodies posted to
// /v1/traces.
func StartHTTP(tb testing.TB) *Receiver {
	tb.Helper()
	lis := listen(tb)
	r := &Receiver{Endpoint: "http://" + lis.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	tb.Cleanup(func() { srv.Close() })
	return r
}

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return lis
}
