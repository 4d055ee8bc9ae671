package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestSentinelFailover: limits are exact through Sentinel, and after the
// master is killed and a replica promoted, the same client and store resume
// limiting exactly without a restart.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	sen := redistest.StartSentinel(t)
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		MasterName:            sen.MasterName,
		Addrs:                 sen.SentinelAddrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = client.Close() })
	s := New(client, Options{})
	if got := storetest.AdmitConcurrently(t, 8, 10, storetest.Taking(storetest.T0, []window.Counter{storetest.Req("before", 50, 1)}, s)); got != 50 {
		t.Errorf("admitted %d before failover, want 50", got)
	}

	sen.KillMaster()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	newMaster, err := sen.WaitForNewMaster(ctx, sen.Master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// Calls fail until the client has found the new master; then they work.
	var last error
	for ctx.Err() == nil {
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, last = s.Take(cctx, storetest.T0, []window.Counter{storetest.Req("probe", 1000, 1)}, make([]window.Result, 1))
		ccancel()
		if last == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("Take never succeeded after failover to %s: %v", newMaster, last)
	}
	if got := storetest.AdmitConcurrently(t, 8, 10, storetest.Taking(storetest.T0, []window.Counter{storetest.Req("after", 50, 1)}, s)); got != 50 {
		t.Errorf("admitted %d after failover, want 50", got)
	}
}
