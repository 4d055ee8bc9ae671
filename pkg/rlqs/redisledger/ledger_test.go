package redisledger

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/ledgertest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// The same cases as the memory ledger's, one request and batches, on a
// single node, behind
// Sentinel, and on a cluster (where the cases' keys land on several
// nodes).
func TestTable(t *testing.T) {
	t.Parallel()
	for name, start := range servers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := start(t)()
			n := 0
			ledgertest.Table(t, func(*testing.T) rlqs.Ledger {
				n++ // a prefix per case: the cases share the server
				return New(c, Options{Prefix: "rlqs:" + strings.Repeat("x", n) + ":"})
			})
			ledgertest.Batch(t, func(*testing.T) rlqs.Ledger {
				n++
				return New(c, Options{Prefix: "rlqs:" + strings.Repeat("x", n) + ":"})
			})
		})
	}
}

// Two ledgers over one Redis are two replicas: the simulated fleet's
// clients report to either, and the guarantee must hold as in memory.
func TestGuaranteeTwoReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, sc := range ledgertest.Named(t, "2:1 at 3x", "joins and leaves", "limit changes", "window rule 2:1") {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			prefix := "rlqs:" + sc.Name + ":"
			a := New(srv.BoundedClient(t), Options{Prefix: prefix})
			b := New(srv.BoundedClient(t), Options{Prefix: prefix})
			res := ledgertest.Run(t, sc, []rlqs.Ledger{a, b})
			ledgertest.CheckBound(t, sc, res)
			ledgertest.CheckFull(t, sc, res)
			ledgertest.CheckUnder(t, sc, res)
		})
	}
}

// Replicas writing one bucket at once never fail and never over-grant.
func TestConcurrentReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ledgertest.Concurrent(t, 8, 20,
		New(srv.BoundedClient(t), Options{}), New(srv.BoundedClient(t), Options{}))
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := New(srv.BoundedClient(t), Options{})
	b := New(srv.BoundedClient(t), Options{})
	c := New(srv.BoundedClient(t), Options{Tries: 1})
	ctx := context.Background()
	f := rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 10}
	start := time.Now()
	for _, step := range []struct {
		l      *Ledger
		client string
		at     time.Duration
		trips  uint64 // the ledger's total after the step
		capped uint64 // and its writes capped in Redis
	}{
		{a, "x", 0, 3, 0}, // read, then the write: NOSCRIPT and EVAL
		{a, "x", 0, 4, 0}, // the state it wrote is current: the write alone
		{a, "y", 0, 5, 0},
		{b, "z", 0, 2, 0}, // b reads and writes (a loaded the script)
		// b wrote, and a's copy is younger than the refresh: the write is
		// capped in Redis, one trip.
		{a, "x", 0, 6, 1},
		// a's copy is stale and older than the refresh: the write answers
		// the hash, and a divides again and writes.
		{a, "x", 2 * time.Second, 8, 1},
		{a, "x", 2 * time.Second, 9, 1}, // current again: the write alone
		{c, "w", 2 * time.Second, 2, 0}, // c reads and writes
		// With one try, c's write is capped however old its copy.
		{a, "x", 2 * time.Second, 10, 2},
		{c, "w", 5 * time.Second, 3, 1},
	} {
		r := rlqs.Report{Client: step.client, Allowed: 5, Elapsed: time.Second}
		if _, err := rlqs.AssignOne(ctx, step.l, start.Add(step.at), "k", f, r, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, capped := step.l.RoundTrips(), step.l.Recomputed(); got != step.trips || capped != step.capped {
			t.Fatalf("after %s's Assign at %v: RoundTrips() = %d, Recomputed() = %d, want %d, %d",
				step.client, step.at, got, capped, step.trips, step.capped)
		}
	}
}

// A bucket that expired and was written again by another replica never
// matches the version a ledger saw before: the versions are never reused.
func TestExpiredAndRewritten(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.BoundedClient(t)
	a, b := New(c, Options{}), New(srv.BoundedClient(t), Options{})
	ctx := context.Background()
	f := rlqs.Fleet{Tokens: 10, Period: time.Second, Burst: 10}
	now := time.Now()
	if s, err := rlqs.AssignOne(ctx, a, now, "k", f, rlqs.Report{Client: "x", Allowed: 50, Elapsed: 5 * time.Second}, time.Minute); err != nil || s.Rate != 10*rlqs.PerSecond {
		t.Fatalf("a: %+v, %v; want the whole rate", s, err)
	}
	if err := c.Del(ctx, "rlqs:k").Err(); err != nil { // as if it had expired
		t.Fatal(err)
	}
	if s, err := rlqs.AssignOne(ctx, b, now, "k", f, rlqs.Report{Client: "y", Allowed: 50, Elapsed: 5 * time.Second}, time.Minute); err != nil || s.Rate != 10*rlqs.PerSecond {
		t.Fatalf("b: %+v, %v; want the whole rate of the empty bucket", s, err)
	}
	// a's cache still holds x alone; the write must find y.
	s, err := rlqs.AssignOne(ctx, a, now, "k", f, rlqs.Report{Client: "x", Allowed: 50, Elapsed: 5 * time.Second}, time.Minute)
	if err != nil || s.Rate != 0 {
		t.Fatalf("a again: %+v, %v; want nothing, y holds the whole rate", s, err)
	}
}

// The hash goes when its last share would: nothing stays behind a bucket
// no one reports.
func TestExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.BoundedClient(t)
	l := New(c, Options{})
	ctx := context.Background()
	now := time.Now()
	if _, err := rlqs.AssignOne(ctx, l, now, "k", rlqs.Fleet{Tokens: 1, Period: time.Second, Burst: 1},
		rlqs.Report{Client: "a", Allowed: 1}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(ctx, "rlqs:k").Result()
	if err != nil {
		t.Fatal(err)
	}
	// 2 s of TTL and 1 s of grace.
	if ttl <= 2*time.Second || ttl > 3*time.Second+time.Millisecond {
		t.Fatalf("PTTL = %v, want just under 3 s", ttl)
	}
	v, err := c.HGet(ctx, "rlqs:k", "c:a").Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseState(v); err != nil {
		t.Fatalf("stored state %q: %v", v, err)
	}
}

// A stopped Redis is an error wrapping window.ErrStore; a corrupt bucket
// too, rather than a share computed from garbage.
func TestErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.BoundedClient(t)
	ctx := context.Background()
	f := rlqs.Fleet{Tokens: 1, Period: time.Second, Burst: 1}
	l := New(c, Options{})
	if err := c.HSet(ctx, "rlqs:bad", "c:a", "1,2,3").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rlqs.AssignOne(ctx, l, time.Now(), "bad", f, rlqs.Report{Client: "b"}, time.Minute); !errors.Is(err, window.ErrStore) || !errors.Is(err, errState) {
		t.Fatalf("Assign on a corrupt bucket = %v, want ErrStore and errState", err)
	}
	srv.Stop()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := rlqs.AssignOne(cctx, l, time.Now(), "k", f, rlqs.Report{Client: "a"}, time.Minute); !errors.Is(err, window.ErrStore) {
		t.Fatalf("Assign with Redis stopped = %v, want ErrStore", err)
	}
}

var _ client = (redis.UniversalClient)(nil)
