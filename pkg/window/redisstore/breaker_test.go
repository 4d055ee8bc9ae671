package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/faultproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestBreakerCountsOnlyRedisFailures puts a window.Breaker, set as the
// sidecar sets it (5 failures over 250 ms, MinBudget 100 ms, the store's
// Budget), over a batched store on a real Redis behind a fault proxy, and
// sends rounds of concurrent Takes, moving the breaker's clock 100 ms per
// round instead of sleeping. Calls whose budget is shorter than Redis's
// round trip (a short caller deadline, or the store's cap under a long one)
// all fail, against a Redis that answers: the circuit must stay closed.
// A Redis that does not answer within a long budget (blackhole), or whose
// connections are refused (stopped), must still open it.
func TestBreakerCountsOnlyRedisFailures(t *testing.T) {
	t.Parallel()
	const slow = 25 * time.Millisecond // each way: a 50 ms round trip
	for _, tc := range []struct {
		name     string
		cap      time.Duration // the store's MaxTimeout
		deadline time.Duration // the callers'
		fault    func(srv *redistest.Server, p *faultproxy.Proxy)
		wantOpen bool
	}{
		{name: "short deadlines, slow Redis", deadline: 20 * time.Millisecond,
			fault: func(_ *redistest.Server, p *faultproxy.Proxy) { p.Set(faultproxy.Fault{Latency: slow}) }},
		{name: "store cap 15ms, long deadlines, slow Redis", cap: 15 * time.Millisecond, deadline: time.Second,
			fault: func(_ *redistest.Server, p *faultproxy.Proxy) { p.Set(faultproxy.Fault{Latency: slow}) }},
		{name: "blackhole, long deadlines", deadline: 200 * time.Millisecond, wantOpen: true,
			fault: func(_ *redistest.Server, p *faultproxy.Proxy) { p.Set(faultproxy.Fault{Blackhole: true}) }},
		{name: "Redis stopped, short deadlines", deadline: 20 * time.Millisecond, wantOpen: true,
			fault: func(srv *redistest.Server, _ *faultproxy.Proxy) { srv.Stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			p, err := faultproxy.Start(t.Context(), srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			client := redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			s := mustBatched(t, client, Options{Timeout: 15 * time.Millisecond, MaxTimeout: tc.cap}, BatchOptions{})
			t.Cleanup(func() { s.Close() })
			var mu sync.Mutex
			clock := time.Unix(1_763_800_000, 0)
			now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
			b := window.NewBreaker(s, window.BreakerOptions{FailureThreshold: 5, FailFor: 250 * time.Millisecond,
				OpenFor: time.Hour, Now: now, MinBudget: 100 * time.Millisecond, Budget: s.Budget})
			req := []window.Counter{storetest.Req("breaker", 1_000_000, 1)}
			// Warm the store past the breaker (connection, script load):
			// under a 15 ms cap on a busy machine the first call's extra
			// round trips can time out, which is not what this test is about.
			for i := 0; ; i++ {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				_, err = s.Take(ctx, storetest.T0, req, make([]window.Result, 1))
				cancel()
				if err == nil {
					break
				}
				if i == 20 {
					t.Fatalf("store Take before the fault: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, err = b.Take(ctx, storetest.T0, req, make([]window.Result, 1))
			cancel()
			if err != nil {
				t.Fatalf("Take before the fault: %v", err)
			}
			tc.fault(srv, p)

			failed := 0
			for range 10 {
				var wg sync.WaitGroup
				errs := make([]error, 5)
				for i := range errs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
						defer cancel()
						_, errs[i] = b.Take(ctx, storetest.T0, req, make([]window.Result, 1))
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						failed++
					}
				}
				mu.Lock()
				clock = clock.Add(100 * time.Millisecond)
				mu.Unlock()
				if b.State() == window.BreakerOpen {
					break
				}
			}
			if failed == 0 {
				t.Fatal("no Take failed: the fault did not bite")
			}
			if open := b.State() == window.BreakerOpen; open != tc.wantOpen {
				t.Errorf("breaker open = %v after %d failed Takes, want %v", open, failed, tc.wantOpen)
			}
		})
	}
}
