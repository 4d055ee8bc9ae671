package metrics

import (
	"context"
	"net"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestRLQSMetrics drives a real RLQS stream and reads the metrics it
// leaves: Envoy's reported counts per domain, rule and decision, the
// assignments by kind, the refusals by reason, and the streams and
// buckets, which go back to 0 when the stream ends.
func TestRLQSMetrics(t *testing.T) {
	t.Parallel()
	set, err := rules.Parse([]string{"r.yaml"}, map[string][]byte{"r.yaml": []byte(
		"domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 600, name: per_user}\n")})
	if err != nil {
		t.Fatal(err)
	}
	store := window.NewMemory()
	rls, err := envoyrls.NewServer(envoyrls.Options{Store: store, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewRLQS(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rlqs.New(rlqs.Options{Counters: rls, Store: store, Ledger: rlqs.NewMemory(rlqs.Policy{}), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, srv)
	go g.Serve(lis)
	defer func() { srv.Drain(); g.GracefulStop(); srv.Wait() }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	usage := func(k, v string, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{k: v}},
			TimeElapsed: durationpb.New(5 * time.Second), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
	}
	for range 2 {
		if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			usage("user", "a", 3, 2), usage("user", "b", 4, 0), usage("other", "x", 7, 1),
			{BucketId: &rlqsv3.BucketId{}},
		}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.reported.WithLabelValues("edge", "per_user", "allowed"), 14},
		{m.reported.WithLabelValues("edge", "per_user", "denied"), 4},
		{m.reported.WithLabelValues("edge", "", "allowed"), 14},
		{m.reported.WithLabelValues("edge", "", "denied"), 2},
		{m.assigned.WithLabelValues("edge", "token_bucket"), 4},
		{m.assigned.WithLabelValues("edge", "allow_all"), 2},
		{m.refused.WithLabelValues("empty_bucket"), 2},
		{m.streams, 1},
		{m.buckets, 3},
	} {
		if got := testutil.ToFloat64(tt.c); got != tt.want {
			t.Errorf("%s = %v, want %v", desc(tt.c), got, tt.want)
		}
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(m.streams) != 0 || testutil.ToFloat64(m.buckets) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after the stream ended: streams %v, buckets %v; want 0", testutil.ToFloat64(m.streams), testutil.ToFloat64(m.buckets))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func desc(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
}
