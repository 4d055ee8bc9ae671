package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/envoyrlqs"
)

// fixedServer answers every usage with the same token bucket, perSecond tokens a second and one at most: the
// simplest RLQS server, so that the generator's counts can be checked against what the server saw and what
// the Envoys could admit.
type fixedServer struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	perSecond        uint32
	reports, usages  atomic.Uint64
	noDomain, ranges atomic.Uint64
}

func (s *fixedServer) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	for {
		msg, err := st.Recv()
		if err != nil {
			return nil
		}
		s.reports.Add(1)
		if msg.GetDomain() != "bench" {
			s.noDomain.Add(1)
		}
		resp := &rlqspb.RateLimitQuotaResponse{}
		for _, u := range msg.GetBucketQuotaUsages() {
			s.usages.Add(1)
			if u.GetTimeElapsed().AsDuration() < 0 {
				s.ranges.Add(1)
			}
			a := envoyrlqs.Assign(envoyrlqs.TokenBucket(1, s.perSecond, time.Second), 10*time.Second)
			a.BucketId = u.GetBucketId()
			resp.BucketAction = append(resp.BucketAction, a)
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

func startFixed(t *testing.T, perSecond uint32) (*fixedServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fs := &fixedServer{perSecond: perSecond}
	rlqspb.RegisterRateLimitQuotaServiceServer(srv, fs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return fs, lis.Addr().String()
}

// TestFleet runs a small fleet against fixedServer: every report carries every bucket with the domain, the
// per-usage counts add up, every Envoy takes the assignments, and the fleet admits no more than the Envoys'
// token buckets let it.
func TestFleet(t *testing.T) {
	const streams, buckets, perSecond = 3, 4, 20
	fs, addr := startFixed(t, perSecond)
	var stdout, stderr bytes.Buffer
	args := []string{"-addr", addr, "-streams", "3", "-buckets", "4", "-interval", "200ms", "-tick", "20ms",
		"-warmup", "300ms", "-duration", "1500ms", "-limit", "30", "-window", "500ms", "-json", "-marks"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if got := stderr.String(); got != "mark start\nmark end\n" {
		t.Errorf("stderr = %q, want the two marks", got)
	}
	var l result.Load
	if err := json.Unmarshal(stdout.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	r := l.RLQS
	if r == nil {
		t.Fatalf("no rlqs figures in %s", stdout.String())
	}
	if l.Errors != 0 || fs.noDomain.Load() != 0 || fs.ranges.Load() != 0 {
		t.Errorf("errors %d (%s), reports without the domain %d, negative elapsed %d", l.Errors, l.FirstError,
			fs.noDomain.Load(), fs.ranges.Load())
	}
	// 3 Envoys reporting every 200 ms for 1.5 s: about 22 reports; each carries every bucket.
	if l.Calls < 15 || l.Calls > 30 || r.Usages != l.Calls*buckets {
		t.Errorf("reports %d, usages %d: want about 22 and 4 usages each", l.Calls, r.Usages)
	}
	if fs.reports.Load() < l.Calls || fs.usages.Load() != fs.reports.Load()*buckets {
		t.Errorf("server saw %d reports with %d usages, generator counted %d", fs.reports.Load(), fs.usages.Load(), l.Calls)
	}
	if r.TokenBucket < l.Calls*buckets/2 || r.DenyAll+r.AllowAll+r.Abandons != 0 {
		t.Errorf("actions: %+v", r)
	}
	// Demand is 3 × 30 per 0.5 s = 180/s per bucket; 3 token buckets of 20/s admit at most 60/s and 3 tokens
	// of burst each time one fills, plus what the first ticks allowed before the first assignment (all of it,
	// but that is in the warm-up).
	if r.OfferedPerS < 150 || r.OfferedPerS > 210 {
		t.Errorf("offered %.1f/s per bucket, want about 180", r.OfferedPerS)
	}
	if max := float64(streams*perSecond) + 3/1.5; r.AdmittedPerS > max || r.AdmittedPerS < 0.8*streams*perSecond {
		t.Errorf("admitted %.1f/s per bucket, want about %d and at most %.1f", r.AdmittedPerS, streams*perSecond, max)
	}
	// Windows of 0.5 s wholly inside 1.5 s: 2 or 3 per bucket. 60/s is 30 per window, the limit: ε about 0.
	if r.Windows < 2*buckets || r.Windows > 3*buckets {
		t.Errorf("windows %d, want 8 to 12", r.Windows)
	}
	if r.EpsilonMax > 0.3 || r.FillMin < 0.6 {
		t.Errorf("admitted/limit from %.3f to %.3f, want about 1", r.FillMin, 1+r.EpsilonMax)
	}
}

// TestOverAdmission checks the per-window arithmetic: only windows wholly inside the span count, and the
// fleet's admitted requests in each are summed over the Envoys before they are compared with the limit.
func TestOverAdmission(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	sp := span{start: t0.Add(500 * time.Millisecond), end: t0.Add(3 * time.Second)}
	ms := t0.UnixMilli()
	a := &envoy{admitted: map[winKey]uint64{{0, ms}: 1000, {0, ms + 1000}: 60, {0, ms + 2000}: 50, {1, ms + 1000}: 40}}
	b := &envoy{admitted: map[winKey]uint64{{0, ms + 1000}: 50, {1, ms + 1000}: 30, {1, ms + 2000}: 100}}
	r := &result.RLQS{LimitPerWindow: 100}
	overAdmission(r, []*envoy{a, b}, sp, time.Second)
	// Windows at 1 s and 2 s count (the one at 0 began before the span): bucket 0 has 110 and 50, bucket 1 70 and 100.
	if r.Windows != 4 || r.FillMin != 0.5 || r.EpsilonMax < 0.0999 || r.EpsilonMax > 0.1001 || r.EpsilonP50 != 0 {
		t.Errorf("windows %d, fill min %v, ε max %v, ε median %v; want 4, 0.5, 0.1, 0", r.Windows, r.FillMin,
			r.EpsilonMax, r.EpsilonP50)
	}
}
