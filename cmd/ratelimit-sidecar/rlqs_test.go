package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

func TestRLQSFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"-rlqs=false"}, nil, ""},
		{[]string{"-rlqs-assignment-ttl", "20s"}, nil, ""},
		{[]string{"-rlqs-assignment-ttl", "5s"}, nil, "-rlqs-assignment-ttl 5s: want whole seconds, more than Envoy's report interval of 5s"},
		{[]string{"-rlqs-assignment-ttl", "7500ms"}, nil, "-rlqs-assignment-ttl 7.5s: want whole seconds"},
		{nil, map[string]string{"RLS_RLQS_ASSIGNMENT_TTL": "1s"}, "-rlqs-assignment-ttl 1s"},
		{[]string{"-rlqs-max-streams", "0"}, nil, "-rlqs-max-streams 0: want at least 1"},
		{[]string{"-rlqs-max-buckets", "-1"}, nil, "-rlqs-max-buckets -1: want at least 1"},
	}
	for _, tt := range tests {
		args := append([]string{"-config", "r.yaml"}, tt.args...)
		_, err := parseOptions("test", args, env(tt.env), io.Discard)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("parseOptions(%q) = %v", args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("parseOptions(%q) error = %v, want %q", args, err, tt.wantErr)
		}
	}
}

// TestRLQSServedBesideShouldRateLimit: by default the RLQS service answers
// on the gRPC listener from the same rules; at shutdown its streams end
// with Unavailable at once, so shutdown does not wait -shutdown-timeout for
// them. With -rlqs=false the method is Unimplemented.
func TestRLQSServedBesideShouldRateLimit(t *testing.T) {
	t.Parallel()
	for _, enabled := range []bool{true, false} {
		o, err := parseOptions("test", []string{"-config", writeRules(t, goodRules(6000)), "-grpc-addr", "127.0.0.1:0", "-http-addr", "",
			"-shutdown-timeout", "60s", "-rlqs=" + map[bool]string{true: "true", false: "false"}[enabled]}, env(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		a, err := newApp(context.Background(), o, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer a.close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- a.serve(ctx, make(chan os.Signal)) }()

		// The stream has a context of its own: cancelling ctx, which stops
		// serve, must not also end the stream on the client's side, or the
		// check of the status it ends with below would see Canceled.
		sctx, scancel := context.WithCancel(context.Background())
		defer scancel()
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(dial(t, a.grpcLis.Addr().String())).StreamRateLimitQuotas(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"k": "v"}}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1,
		}}}); err != nil && !errors.Is(err, io.EOF) {
			// io.EOF: the server ended the stream first (with -rlqs=false
			// it answers Unimplemented at once); Recv returns its status.
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if !enabled {
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("-rlqs=false: %v, %v; want Unimplemented", resp, err)
			}
			cancel()
			<-done
			continue
		}
		if err != nil || resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
			t.Fatalf("first report: %v, %v; want a token bucket", resp, err)
		}
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("shutdown waits for the RLQS stream")
		}
		if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("stream after shutdown: %v, want Unavailable", err)
		}
		t.Logf("shutdown took %v with an RLQS stream open", time.Since(start))
	}
}

// TestRLQSReplicasDivideOneBudget: two sidecars on one Redis divide a
// rule among the Envoys of both: the rates they assign add up to at most
// the rule's, which two ledgers of their own (each giving its client the
// whole rate) would not. (The second client may get DENY_ALL, rate 0,
// until the first's share shrinks at its next report: see the policy.)
func TestRLQSReplicasDivideOneBudget(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	rules := writeRules(t, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 600}\n")
	var sum uint64
	for i := range 2 {
		s := startSidecar(t, []string{"-config", rules, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-redis-url", r.URL()}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := rlqsv3.NewRateLimitQuotaServiceClient(dial(t, s.grpcAddr)).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Replica 0's Envoy reports a measured demand of 50 requests a
		// second, the whole rule and more. Replica 1's is a new Envoy: its
		// first report is a subscription (elapsed 0), which is answered at
		// once. (A periodic first report that the ledger caps is answered
		// with nothing, as after a reconnect, until the old share lapses a
		// TTL later: that would make this test wait 15 s.) With one ledger
		// per replica, replica 1 would grant half the rule on top of
		// replica 0's whole.
		elapsed := map[int]time.Duration{0: 5 * time.Second, 1: 0}[i]
		if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"k": "v"}}, TimeElapsed: durationpb.New(elapsed),
			NumRequestsAllowed: 1, NumRequestsDenied: 249,
		}}}); err != nil && !errors.Is(err, io.EOF) {
			// io.EOF: the server ended the stream first (with -rlqs=false
			// it answers Unimplemented at once); Recv returns its status.
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		strategy := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy()
		rate := rlqs.StrategyRate(strategy)
		if i == 0 && strategy.GetTokenBucket() == nil {
			t.Fatalf("replica 0: %v, want a token bucket", strategy)
		}
		t.Logf("replica %d assigns rate %d (%d a second)", i, rate, rlqs.PerSecond)
		sum += rate
	}
	if sum > 10*rlqs.PerSecond {
		t.Errorf("the two replicas assign rate %d in all, more than the rule's 10 a second (%d)", sum, 10*rlqs.PerSecond)
	}
}

// tlsReport sends one RLQS report on a new connection to addr with creds
// and returns the error of its answer.
func tlsReport(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "rl", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"k": "v"}}, NumRequestsAllowed: 1,
	}}}); err != nil {
		_, err = stream.Recv() // the stream's real error
		return err
	}
	_, err = stream.Recv()
	return err
}
