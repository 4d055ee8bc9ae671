package metrics

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// BenchmarkServerObserved is envoyrls's BenchmarkShouldRateLimit (memory
// store, one descriptor, allowed) with a Recorder observing: what metrics
// add to a decision once its label sets are warm.
func BenchmarkServerObserved(b *testing.B) {
	rs, err := rules.Load("../../bench/harness/bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	m, _ := newTestMetrics(b, Options{})
	now := time.Unix(1_763_800_020, 0)
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: rs, Observer: m, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k" + strconv.Itoa(i)}}},
		}}
	}
	ctx := context.Background()
	if _, err := srv.ShouldRateLimit(ctx, reqs[0]); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := srv.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
