package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestSentinelFailover: limits are exact through Sentinel, and after the
// master is killed and a replica promoted, the same client and store resume
// limiting exactly without a restart. The store waits for a replica's
// acknowledgement, as the sidecar's does behind Sentinel: the promoted
// replica has none after its master died, and must count all the same,
// since no failover could drop its writes (Promotable).
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	sen := redistest.StartSentinel(t)
	client := sentinelClient(t, sen)
	p := sentinelPromotable(t, sen)
	s := New(client, Options{WaitReplicas: 1, Promotable: p})
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
	// Calls fail until the client has found the new master; then they work,
	// within Envoy's default 20 ms: the promoted replica has no replica, so
	// a WAIT would wait out the deadline; none is sent (Promotable.None).
	var last error
	for ctx.Err() == nil {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Millisecond)
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

// TestSentinelFailoverKeepsCharges: a manual Sentinel failover (SENTINEL
// FAILOVER, as the soak does) under load from a batched store loses no
// charge that the store reported counted. The old master stays up and keeps
// taking writes between the replica's promotion and its own demotion, then
// drops them when it resyncs from the new master; with WaitReplicas each
// script call waits for a replica's acknowledgement, so a charge on a master
// whose replica was promoted (the sentinels list it, up: Promotable) is
// reported unconfirmed (an error), not counted.
// After the failover Redis must hold every admitted hit, and at most one
// more per failed call (a failed call may have run).
func TestSentinelFailoverKeepsCharges(t *testing.T) {
	t.Parallel()
	sen := redistest.StartSentinel(t)
	client := sentinelClient(t, sen)
	s := mustBatched(t, client, Options{Timeout: 2 * time.Second, WaitReplicas: 1, Promotable: sentinelPromotable(t, sen)}, BatchOptions{})
	t.Cleanup(func() { s.Close() })
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := storetest.Req("charges", 1_000_000_000, 1)

	var admitted, failed, afterSwitch atomic.Int64
	var switched atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]window.Result, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := s.Take(context.Background(), storetest.T0, []window.Counter{req}, res)
				switch {
				case err != nil:
					failed.Add(1)
					time.Sleep(time.Millisecond) // a failover: do not spin
				case ok:
					admitted.Add(1)
					if switched.Load() {
						afterSwitch.Add(1)
					}
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	if err := pollUntil(10*time.Second, func() bool { return admitted.Load() >= 500 }); err != nil {
		t.Fatalf("load before the failover: %v (admitted %d, failed %d)", err, admitted.Load(), failed.Load())
	}

	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.SentinelAddrs[0], Protocol: 2})
	t.Cleanup(func() { _ = sc.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := sc.Failover(ctx, sen.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	newMaster, err := sen.WaitForNewMaster(ctx, sen.Master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// The old master learns it is a replica a moment after the promotion;
	// wait until it says so and has synced, so that what it dropped is gone.
	old := redis.NewClient(&redis.Options{Addr: sen.Master.Addr, Protocol: 2})
	t.Cleanup(func() { _ = old.Close() })
	if err := pollUntil(20*time.Second, func() bool {
		info, err := old.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	}); err != nil {
		t.Fatalf("old master %s never became a synced replica of %s: %v", sen.Master.Addr, newMaster, err)
	}
	switched.Store(true)
	if err := pollUntil(20*time.Second, func() bool { return afterSwitch.Load() >= 500 }); err != nil {
		t.Fatalf("load after the failover: %v (admitted %d, failed %d)", err, admitted.Load(), failed.Load())
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})

	got := counter(t, s, req)
	a, f := uint64(admitted.Load()), uint64(failed.Load())
	t.Logf("admitted %d, failed %d, counted %d on %s", a, f, got, newMaster)
	if got < a {
		t.Errorf("lost charges: Redis counted %d, the store admitted %d (%d lost in the failover)", got, a, a-got)
	}
	if got > a+f {
		t.Errorf("charges counted twice: Redis counted %d, the store admitted %d and %d failed", got, a, f)
	}
}

// TestWaitReplicasWithoutReplica: with WaitReplicas and no replica to
// acknowledge, a Take that counted fails with ErrUnconfirmed, which wraps
// window.ErrStore (the caller's failure mode applies), within its deadline;
// unbatched and batched alike. The deadline is a second: Redis checks WAIT's
// timeout only at its hz (every 100 ms by default), so under a shorter one
// the deadline may end the call first (still an error wrapping
// window.ErrStore).
func TestWaitReplicasWithoutReplica(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for _, batched := range []bool{false, true} {
		var s *Store
		if batched {
			s = mustBatched(t, client, Options{WaitReplicas: 1}, BatchOptions{})
			t.Cleanup(func() { s.Close() })
		} else {
			s = New(client, Options{WaitReplicas: 1})
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := s.Take(ctx, storetest.T0, []window.Counter{storetest.Req("alone", 10, 1)}, make([]window.Result, 1))
		late := ctx.Err()
		cancel()
		if !errors.Is(err, ErrUnconfirmed) || !errors.Is(err, window.ErrStore) {
			t.Errorf("batched %v: Take = %v, want ErrUnconfirmed and window.ErrStore", batched, err)
		}
		if late != nil {
			t.Errorf("batched %v: Take returned after its deadline", batched)
		}
	}
}

// sentinelClient returns a failover client through sen's sentinels, set as
// the sidecar sets its own (no retries, deadlines bound calls), closed when
// t ends.
func sentinelClient(t *testing.T, sen *redistest.Sentinel) redis.UniversalClient {
	t.Helper()
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		MasterName:            sen.MasterName,
		Addrs:                 sen.SentinelAddrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// sentinelPromotable returns a Promotable through sen's sentinels, closed
// when t ends.
func sentinelPromotable(t *testing.T, sen *redistest.Sentinel) *Promotable {
	t.Helper()
	var opts []*redis.Options
	for _, a := range sen.SentinelAddrs {
		opts = append(opts, &redis.Options{Addr: a, Protocol: 2})
	}
	p := NewPromotable(opts, sen.MasterName, 0)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPromotable: the sentinels' count of replicas a failover could
// promote is 1 with the replica up and falls to 0 once they mark it down;
// Count and None give the last count while it is recent, and keep it fresh
// in the background while it is 0; with no sentinel answering, Ask fails
// and Count is not ok.
func TestPromotable(t *testing.T) {
	t.Parallel()
	sen := redistest.StartSentinel(t)
	p := sentinelPromotable(t, sen) // every 250 ms
	if _, ok := p.Count(); ok {
		t.Error("Count ok before any answer")
	}
	if n, err := p.Ask(t.Context()); n != 1 || err != nil {
		t.Fatalf("Ask = %d, %v with the replica up, want 1", n, err)
	}
	if n, ok := p.Count(); n != 1 || !ok {
		t.Errorf("Count = %d, %v after Ask, want 1, true", n, ok)
	}
	if p.None() {
		t.Error("None with a replica up")
	}
	sen.Replica.Stop()
	if err := pollUntil(20*time.Second, func() bool { n, err := p.Ask(t.Context()); return n == 0 && err == nil }); err != nil {
		t.Fatalf("Ask never fell to 0 after the replica was stopped: %v", err)
	}
	// The count stays recent well past the 500 ms it is recent for, with no
	// call asking: while it is 0 it is asked every 250 ms on its own (a
	// master without replicas may see one call a second, a breaker's probe).
	time.Sleep(time.Second)
	if n, ok := p.Count(); n != 0 || !ok {
		t.Errorf("Count = %d, %v a second after the last call, with no replica up; want 0, true", n, ok)
	}
	if !p.None() {
		t.Error("None false with no replica up")
	}
	none := NewPromotable([]*redis.Options{{Addr: sen.Replica.Addr, Protocol: 2, MaxRetries: -1}}, sen.MasterName, 0)
	t.Cleanup(func() { _ = none.Close() })
	if _, err := none.Ask(t.Context()); err == nil {
		t.Error("Ask through no sentinel: no error")
	}
	if _, ok := none.Count(); ok {
		t.Error("Count ok after a failed Ask")
	}
}
