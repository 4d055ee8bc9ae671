package tracing

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// An incoming W3C trace context, as Envoy sends it: sampled, and not.
const (
	traceID          = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID         = "00f067aa0ba902b7"
	sampledParent    = "00-" + traceID + "-" + parentID + "-01"
	notSampledParent = "00-" + traceID + "-" + parentID + "-00"
)

// serve runs the service as the command does, traced by tr: a batched Redis
// store and the ratelimit server behind a gRPC server with ServerOption,
// and returns a client of it.
func serve(t *testing.T, tr *Tracing) rlsv3.RateLimitServiceClient {
	t.Helper()
	store, err := redisstore.NewBatched(redistest.Start(t).Client(t), redisstore.Options{Tracer: tr.Tracer()}, redisstore.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	set, err := rules.Parse([]string{"r.yaml"}, map[string][]byte{"r.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: store, Rules: set, Tracer: tr.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(tr.ServerOption())
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// ask makes one call, with traceparent in its metadata unless it is "".
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, traceparent string) {
	t.Helper()
	ctx := context.Background()
	if traceparent != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent)
	}
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit = %v, %v; want OK", resp.GetOverallCode(), err)
	}
}

func newTracing(t *testing.T, endpoint string, o Options) *Tracing {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	tr, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

// TestExportOverOTLP sends one call with Envoy's traceparent and one
// without, over each protocol, to an in-process OTLP receiver: each call's
// ShouldRateLimit span is the child of the incoming span (or a root), its
// Redis span the child of that, and every span carries the service's
// resource attributes. Shutdown flushes what the batcher holds.
func TestExportOverOTLP(t *testing.T) {
	// Not parallel: the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT.
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			recv := otlptest.StartGRPC(t)
			if proto == ProtocolHTTP {
				recv = otlptest.StartHTTP(t)
			}
			tr := newTracing(t, recv.Endpoint, Options{ServiceName: "rls", ServiceNamespace: "gateway", ServiceInstanceID: "pod-1", SamplingRate: 1, Protocol: proto})
			c := serve(t, tr)
			ask(t, c, sampledParent)
			ask(t, c, "")
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := recv.Spans() // all there: Shutdown flushed them
			if len(spans) != 4 {
				t.Fatalf("%d spans received, want 4 (two calls and their Redis calls): %v", len(spans), spans)
			}
			byID := map[string]otlptest.Span{}
			for _, s := range spans {
				byID[s.ID()] = s
				for k, want := range map[string]string{"service.name": "rls", "service.namespace": "gateway", "service.instance.id": "pod-1"} {
					if got := s.Resource[k]; got != want {
						t.Errorf("span %q resource %s = %q, want %q", s.Name, k, got, want)
					}
				}
			}
			var roots, children int
			for _, s := range spans {
				switch s.Name {
				case "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":
					if s.Attr("ratelimit.domain") != "d" || s.Attr("ratelimit.overall_code") != "OK" {
						t.Errorf("ShouldRateLimit span attributes %v, want domain d, OK", s.Attributes)
					}
					if s.ParentID() == parentID && s.TraceID() == traceID {
						children++
					} else if s.ParentID() == "" && s.TraceID() != traceID {
						roots++
					} else {
						t.Errorf("ShouldRateLimit span in trace %s under %q: neither the incoming span's child nor a root", s.TraceID(), s.ParentID())
					}
				case "redis take":
					p, ok := byID[s.ParentID()]
					if !ok || !strings.HasSuffix(p.Name, "/ShouldRateLimit") || p.TraceID() != s.TraceID() {
						t.Errorf("Redis span's parent %q (%q): want the call's ShouldRateLimit span", s.ParentID(), p.GetName())
					}
					if s.Attr("ratelimit.redis.batch_size") != "1" {
						t.Errorf("Redis span batch size %q, want 1", s.Attr("ratelimit.redis.batch_size"))
					}
				default:
					t.Errorf("unexpected span %q", s.Name)
				}
			}
			if children != 1 || roots != 1 {
				t.Errorf("%d spans under the incoming traceparent and %d roots, want 1 and 1", children, roots)
			}
		})
	}
}

// TestSamplingRateZero: at rate 0 no trace starts here, and a caller that
// did not sample its trace gets none; one that did is followed.
func TestSamplingRateZero(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	tr := newTracing(t, recv.Endpoint, Options{SamplingRate: 0, Protocol: ProtocolGRPC})
	c := serve(t, tr)
	ask(t, c, "")
	ask(t, c, notSampledParent)
	ask(t, c, "00-"+traceID+"-zz-01") // malformed: a new trace
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if spans := recv.Spans(); len(spans) != 0 {
		t.Errorf("rate 0: %d spans exported, want none: %v", len(spans), spans)
	}

	recv = otlptest.StartGRPC(t)
	tr = newTracing(t, recv.Endpoint, Options{SamplingRate: 0, Protocol: ProtocolGRPC})
	ask(t, serve(t, tr), sampledParent)
	tr.Shutdown(context.Background())
	if spans := recv.Spans(); len(spans) != 2 {
		t.Errorf("rate 0, sampled parent: %d spans exported, want 2 (the parent's decision wins)", len(spans))
	}
}

// TestDefaults: the service name defaults to the reference's, the instance
// id to a random UUID.
func TestDefaults(t *testing.T) {
	recv := otlptest.StartHTTP(t)
	tr := newTracing(t, recv.Endpoint, Options{SamplingRate: 1})
	other := newTracing(t, recv.Endpoint, Options{SamplingRate: 1})
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !uuid.MatchString(tr.InstanceID()) || tr.InstanceID() == other.InstanceID() {
		t.Errorf("instance ids %q and %q, want two random version 4 UUIDs", tr.InstanceID(), other.InstanceID())
	}
	_, span := tr.Tracer().Start(context.Background(), "x")
	span.End()
	tr.Shutdown(context.Background())
	spans := recv.WaitSpans(t, 1, 5*time.Second)
	if got := spans[0].Resource["service.name"]; got != DefaultServiceName {
		t.Errorf("service.name = %q, want %q", got, DefaultServiceName)
	}
	if _, ok := spans[0].Resource["service.namespace"]; ok {
		t.Errorf("service.namespace set with none given: %q", spans[0].Resource["service.namespace"])
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{Options{SamplingRate: 1.5}, "sampling rate 1.5"},
		{Options{SamplingRate: -0.1}, "sampling rate -0.1"},
		{Options{Protocol: "zipkin"}, `exporter protocol "zipkin"`},
		{Options{Protocol: ProtocolGRPC, SamplingRate: 0.5}, ""},
		{Options{}, ""},
	} {
		err := tt.o.Validate()
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v.Validate() = %v, want %q", tt.o, err, tt.want)
		}
		if tt.want == "" {
			continue
		}
		if _, err := New(context.Background(), tt.o); err == nil {
			t.Errorf("New(%+v) = nil error, want %q", tt.o, tt.want)
		}
	}
}
