package redisledger

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/ledgertest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// servers starts each kind of Redis the ledger runs on and returns a
// function making clients of it: a single node, a Sentinel-managed
// master, and a cluster (where a batch's keys land on several nodes).
func servers() map[string]func(t *testing.T) func() redis.UniversalClient {
	return map[string]func(t *testing.T) func() redis.UniversalClient{
		"single": func(t *testing.T) func() redis.UniversalClient {
			s := redistest.Start(t)
			return func() redis.UniversalClient { return s.BoundedClient(t) }
		},
		"sentinel": func(t *testing.T) func() redis.UniversalClient {
			s := redistest.StartSentinel(t)
			return func() redis.UniversalClient { return s.FailoverClient(t) }
		},
		"cluster": func(t *testing.T) func() redis.UniversalClient {
			s := redistest.StartCluster(t, 3)
			return func() redis.UniversalClient { return s.Client(t) }
		},
	}
}

// batchOf is one request per bucket k0..k<n-1> from client.
func batchOf(n int, client string, elapsed time.Duration) []rlqs.Request {
	f := rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 10}
	reqs := make([]rlqs.Request, n)
	for i := range reqs {
		reqs[i] = rlqs.Request{Key: fmt.Sprintf("k%d", i), Fleet: f, TTL: time.Minute,
			Report: rlqs.Report{Client: client, Allowed: uint64(i), Denied: 1, Elapsed: elapsed}}
	}
	return reqs
}

// A batch's round trips do not grow with its size: one write when the
// copies are current, one read more for buckets not cached, one EVAL more
// where a node lost the script, and a reread and a second write for
// buckets another replica wrote since.
func TestBatchRoundTrips(t *testing.T) {
	t.Parallel()
	const n = 40
	for name, start := range servers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			newClient := start(t)
			a, b := New(newClient(), Options{}), New(newClient(), Options{})
			t0 := time.Now()
			ctx := context.Background()
			for i, step := range []struct {
				l      *Ledger
				client string
				at     time.Duration
				trips  uint64 // the round trips of the step's Assign
			}{
				{a, "x", 0, 3},               // read, write: NOSCRIPT, and EVAL
				{a, "x", 5 * time.Second, 1}, // the copies are current: the write alone
				{a, "x", 10 * time.Second, 1},
				{b, "y", 10 * time.Second, 2}, // b reads and writes
				// b wrote every bucket, and a's copies are older than the
				// refresh: the writes answer the hashes, and a writes again.
				{a, "x", 15 * time.Second, 2},
				{a, "x", 20 * time.Second, 1},
			} {
				before := step.l.RoundTrips()
				res := step.l.Assign(ctx, t0.Add(step.at), batchOf(n, step.client, 5*time.Second))
				for j, r := range res {
					if r.Err != nil {
						t.Fatalf("step %d, request %d: %v", i, j, r.Err)
					}
				}
				if got := step.l.RoundTrips() - before; got != step.trips {
					t.Fatalf("step %d (%s at %v): %d round trips for %d requests, want %d", i, step.client, step.at, got, n, step.trips)
				}
			}
		})
	}
}

// One bad bucket fails its own request alone: the others of the batch get
// the shares they would alone, in the same round trips.
func TestBatchPartialFailure(t *testing.T) {
	t.Parallel()
	for name, start := range servers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			newClient := start(t)
			rc := newClient()
			ctx := context.Background()
			// k3's state cannot be read; k7 is not a hash at all.
			if err := rc.HSet(ctx, "rlqs:k3", "c:a", "1,2,3").Err(); err != nil {
				t.Fatal(err)
			}
			if err := rc.Set(ctx, "rlqs:k7", "a string", 0).Err(); err != nil {
				t.Fatal(err)
			}
			l, ref := New(newClient(), Options{}), rlqs.NewMemory(rlqs.Policy{})
			t0 := time.Now()
			for round := range 2 {
				now := t0.Add(time.Duration(round) * 5 * time.Second)
				reqs := batchOf(10, "x", 5*time.Second)
				res := l.Assign(ctx, now, reqs)
				for i, r := range res {
					q := reqs[i]
					switch i {
					case 3:
						if !errors.Is(r.Err, window.ErrStore) || !errors.Is(r.Err, errState) {
							t.Fatalf("round %d, k3 (corrupt) = %+v, %v; want ErrStore and errState", round, r.Share, r.Err)
						}
					case 7:
						if !errors.Is(r.Err, window.ErrStore) {
							t.Fatalf("round %d, k7 (not a hash) = %+v, %v; want ErrStore", round, r.Share, r.Err)
						}
					default:
						want, _ := rlqs.AssignOne(ctx, ref, now, q.Key, q.Fleet, q.Report, q.TTL)
						if r.Err != nil || r.Share.Rate != want.Rate || r.Share.Burst != want.Burst || r.Share.Changed != want.Changed {
							t.Fatalf("round %d, %s = %+v, %v; want %+v as alone", round, q.Key, r.Share, r.Err, want)
						}
					}
				}
			}
		})
	}
}

// Batches of the same buckets in different orders, through two replicas
// at once, neither deadlock nor over-grant.
func TestConcurrentBatches(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ledgertest.ConcurrentBatches(t, 8, 20, 10,
		New(srv.BoundedClient(t), Options{}), New(srv.BoundedClient(t), Options{}))
}

// A Quiet request (a re-check whose share is sent only if it changed)
// writes nothing when the client's share is unchanged and unexpired: no
// round trip, the hash as it was, and the share's old expiry. Otherwise it
// is written as any request.
func TestQuiet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rc := srv.BoundedClient(t)
	l := New(srv.BoundedClient(t), Options{})
	ctx := context.Background()
	f := rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 10}
	t0 := time.Now().Truncate(time.Millisecond)
	first, err := rlqs.AssignOne(ctx, l, t0, "k", f, rlqs.Report{Client: "x", Allowed: 50, Elapsed: 5 * time.Second}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	recheck := rlqs.Report{Client: "x"}
	for i, step := range []struct {
		at      time.Duration
		f       rlqs.Fleet
		quiet   bool
		written bool
	}{
		{time.Second, f, true, false},     // unchanged: nothing written
		{2 * time.Second, f, false, true}, // not quiet: written
		{3 * time.Second, rlqs.Fleet{Tokens: 2, Period: time.Second, Burst: 2}, true, true}, // a lower limit changes the share
		{2 * time.Minute, rlqs.Fleet{Tokens: 2, Period: time.Second, Burst: 2}, true, true}, // expired: written again
	} {
		before, err := rc.HGetAll(ctx, "rlqs:k").Result()
		if err != nil {
			t.Fatal(err)
		}
		trips := l.RoundTrips()
		res := l.Assign(ctx, t0.Add(step.at), []rlqs.Request{{Key: "k", Fleet: step.f, Report: recheck, TTL: time.Minute, Quiet: step.quiet}})
		if res[0].Err != nil {
			t.Fatalf("step %d: %v", i, res[0].Err)
		}
		after, err := rc.HGetAll(ctx, "rlqs:k").Result()
		if err != nil {
			t.Fatal(err)
		}
		wrote := l.RoundTrips() != trips
		if wrote != step.written || !step.written && fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("step %d: %d round trips, hash %v -> %v; want written %v", i, l.RoundTrips()-trips, before, after, step.written)
		}
		if !step.written && (res[0].Share.Changed || !res[0].Share.Expires.Equal(first.Expires) || res[0].Share.Rate != first.Rate) {
			t.Fatalf("step %d: %+v, want the unchanged share of %+v", i, res[0].Share, first)
		}
		if step.written && i == 2 && !res[0].Share.Changed {
			t.Fatalf("step %d: %+v, want a changed share", i, res[0].Share)
		}
	}
}
