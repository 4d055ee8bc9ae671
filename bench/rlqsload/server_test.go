package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs/redisledger"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// serverRules give every bucket {user: b<j>} 60 requests per 2 s.
const serverRules = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 60}
`

// TestAgainstServer runs a small fleet against the project's own RLQS server (pkg/rlqs on the in-memory store
// and ledger, on the real clock): the generator's plumbing works with it end to end, the server's token
// buckets hold the fleet's admissions near the rule, and the fleet is not starved.
func TestAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet for 5.5 s")
	}
	addr, _ := startServer(t, window.NewMemory(), rlqs.NewMemory(rlqs.Policy{}))
	var stdout, stderr bytes.Buffer
	args := []string{"-addr", addr, "-streams", "3", "-buckets", "4", "-interval", "1s", "-tick", "20ms",
		"-warmup", "1500ms", "-duration", "4s", "-limit", "60", "-window", "2s", "-json"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	var l result.Load
	if err := json.Unmarshal(stdout.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	r := l.RLQS
	t.Logf("%s", stdout.String())
	if l.Errors != 0 || l.Calls == 0 || r.Usages != l.Calls*4 || r.TokenBucket == 0 {
		t.Errorf("errors %d (%s), reports %d, usages %d, token buckets %d", l.Errors, l.FirstError, l.Calls, r.Usages, r.TokenBucket)
	}
	if r.Windows < 4 || r.EpsilonMax > 0.5 || r.FillMin < 0.5 {
		t.Errorf("windows %d, admitted/limit from %.3f to %.3f", r.Windows, r.FillMin, 1+r.EpsilonMax)
	}
}

// startServer serves pkg/rlqs with serverRules on store and ledger, on a loopback port, until the test ends,
// and returns its address.
func startServer(tb testing.TB, store window.Store, ledger rlqs.Ledger) (string, *rlqs.Server) {
	tb.Helper()
	rs, err := rules.Parse([]string{"rules.yaml"}, map[string][]byte{"rules.yaml": []byte(serverRules)})
	if err != nil {
		tb.Fatal(err)
	}
	rls, err := envoyrls.NewServer(envoyrls.Options{Store: store, Rules: rs})
	if err != nil {
		tb.Fatal(err)
	}
	logger := zap.NewNop() // a benchmark measures the server, not the test log
	if t, ok := tb.(*testing.T); ok {
		logger = zaptest.NewLogger(t)
	}
	srv, err := rlqs.New(rlqs.Options{Counters: rls, Store: store, Ledger: ledger, Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(grpc.ForceServerCodecV2(envoyrls.NewCodec()))
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, srv)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	tb.Cleanup(func() { srv.Drain(); g.GracefulStop(); <-served; srv.Wait() })
	return lis.Addr().String(), srv
}

// BenchmarkReport sends usage reports of 20 buckets on one stream to pkg/rlqs in this process and waits for each
// answer: time and allocations per report, client and server together, and µs per usage. With the in-memory
// store and ledger (store=memory) that is the server's own work; on a local redis-server (store=redis: the
// Redis window store and ledger) it adds the Redis clients' work and the wait for Redis, and reports the Redis
// round trips per usage (the store's and the ledger's; 2/20 once the ledger has the buckets: one charge, one
// pipeline of writes). The harness's scenario rlqs measures the sidecar process on Redis.
func BenchmarkReport(b *testing.B) {
	b.Run("store=memory", func(b *testing.B) {
		addr, _ := startServer(b, window.NewMemory(), rlqs.NewMemory(rlqs.Policy{}))
		benchReport(b, addr, nil)
	})
	b.Run("store=redis", func(b *testing.B) {
		srv := redistest.Start(b)
		store := redisstore.New(srv.BoundedClient(b), redisstore.Options{})
		ledger := redisledger.New(srv.BoundedClient(b), redisledger.Options{})
		addr, _ := startServer(b, store, ledger)
		benchReport(b, addr, func() uint64 { return store.RoundTrips() + ledger.RoundTrips() })
	})
}

// benchReport is BenchmarkReport against the server at addr; roundTrips, when not nil, counts its Redis
// round trips.
func benchReport(b *testing.B, addr string, roundTrips func() uint64) {
	const buckets = 20
	cc, err := local.Dial(b.Context(), addr, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "bench"}
	for j := range buckets {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"user": bucketValue(j)}},
			TimeElapsed: durationpb.New(5 * time.Second), NumRequestsAllowed: 10, NumRequestsDenied: 1})
	}
	report := func() {
		if err := st.Send(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			b.Fatal(err)
		}
	}
	report() // the subscription: the ledger reads the buckets
	var trips0 uint64
	if roundTrips != nil {
		trips0 = roundTrips()
	}
	b.ReportAllocs()
	start := time.Now()
	n := 0
	for b.Loop() {
		report()
		n++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(n)/buckets, "µs/usage")
	if roundTrips != nil {
		b.ReportMetric(float64(roundTrips()-trips0)/float64(n)/buckets, "roundtrips/usage")
	}
}
