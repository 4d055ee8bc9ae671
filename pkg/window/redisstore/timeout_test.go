package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/faultproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestRedisTakeHonoursDeadline: a Take against a redis-server that hangs
// (SIGSTOP) returns when its bound passes, not at go-redis's own read
// timeout: the context's deadline less a margin for answering (see
// answerMargin), the store's Timeout without one, never past MaxTimeout;
// batched or not.
func TestRedisTakeHonoursDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.BoundedClient(t)
	stores := map[string]*Store{}
	for name, ro := range map[string]Options{
		"":       {Timeout: 50 * time.Millisecond},
		"capped": {Timeout: 50 * time.Millisecond, MaxTimeout: 30 * time.Millisecond},
	} {
		stores["plain"+name] = New(client, ro)
		b := mustBatched(t, client, ro, BatchOptions{})
		t.Cleanup(func() { _ = b.Close() })
		stores["batched"+name] = b
	}
	for _, s := range stores {
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause(t)
	for name, s := range stores {
		capped := s.maxTimeout > 0
		for _, tt := range []struct {
			ctxTimeout time.Duration // 0: no deadline
			want       time.Duration // the bound
			wantCapped time.Duration // the bound under MaxTimeout 30ms
		}{
			{0, 50 * time.Millisecond, 30 * time.Millisecond},                       // the store's Timeout
			{200 * time.Millisecond, 180 * time.Millisecond, 30 * time.Millisecond}, // 9/10 of the caller's, past Timeout
			{20 * time.Millisecond, 15 * time.Millisecond, 15 * time.Millisecond},   // the caller's less 5ms
			{20 * time.Millisecond, 15 * time.Millisecond, 15 * time.Millisecond},   // again, on a pooled connection
		} {
			want := tt.want
			if capped {
				want = tt.wantCapped
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctxTimeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
			}
			start := time.Now()
			_, err := s.Take(ctx, storetest.T0, []window.Counter{storetest.Req("paused", 10, 1)}, make([]window.Result, 1))
			d := time.Since(start)
			cancel()
			if err == nil {
				t.Fatalf("%s, ctx timeout %v: Take against a stopped process succeeded", name, tt.ctxTimeout)
			}
			// Not at once and not much later than the bound (scheduling
			// slack); the clock reads in and out of Take differ a little.
			if d < want-5*time.Millisecond || d > want+150*time.Millisecond {
				t.Errorf("%s, ctx timeout %v: Take returned after %v, want about %v", name, tt.ctxTimeout, d, want)
			}
		}
	}
}

// TestBatchedTakeEndsByItsTimeout: against a paused redis-server, a Take
// that queues behind a call in flight, and then shares its batch with a
// later Take, still ends about Timeout after it began: its batch is bounded
// by the earliest deadline in it, not the latest. (With the latest, B would
// wait for C's deadline: about 1.45 Timeouts.)
func TestBatchedTakeEndsByItsTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.BoundedClient(t)
	// Long enough that a loaded CI machine's scheduling stays well inside
	// the quarter of it the check allows.
	const timeout = 2 * time.Second
	s := mustBatched(t, client, Options{Timeout: timeout}, BatchOptions{})
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	takeAfter := func(delay time.Duration, took *time.Duration, done chan<- struct{}) {
		time.Sleep(delay) // orders the Takes; far from any bound
		start := time.Now()
		_, _ = s.Take(context.Background(), storetest.T0, []window.Counter{storetest.Req("paused", 10, 1)}, make([]window.Result, 1))
		*took = time.Since(start)
		done <- struct{}{}
	}
	var a, b, c time.Duration
	done := make(chan struct{}, 3)
	go takeAfter(0, &a, done)             // in flight until about timeout
	go takeAfter(timeout/2, &b, done)     // queued behind a
	go takeAfter(timeout*19/20, &c, done) // queued behind a, batched with b
	for range 3 {
		<-done
	}
	if b > timeout+timeout/4 {
		t.Errorf("Take b took %v, want about the %v timeout (a took %v, c %v)", b, timeout, a, c)
	}
}

// boundedClient is a client of addr with the options of the sidecar's
// counting path (see redistest.Server.BoundedClient).
func boundedClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestTakeWaitsAsLongAsItsCaller: with Redis 10 ms away each way (a fault
// proxy), a caller that waits a second gets its answer from Redis, though
// the store's Timeout, which applies only without a deadline, is the
// sidecar's 15 ms default; MaxTimeout brings back failing fast, and a
// caller that waits less than the round trip gets an error in time for its
// failure mode.
func TestTakeWaitsAsLongAsItsCaller(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.Start(t.Context(), redistest.Start(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	client := boundedClient(t, p.Addr())
	const timeout = 15 * time.Millisecond
	for _, tt := range []struct {
		name       string
		ctxTimeout time.Duration // 0: none
		maxTimeout time.Duration
		latency    time.Duration // each way
		decided    bool          // by Redis; else a store error
	}{
		{"a second to wait", time.Second, 0, 10 * time.Millisecond, true},
		// Below, round trips of twice the bound: a deadline the runtime
		// fires late must not let a reply in.
		{"a second to wait, capped at 15ms", time.Second, timeout, 15 * time.Millisecond, false},
		{"Envoy's 20ms", 20 * time.Millisecond, 0, 20 * time.Millisecond, false},
		{"no deadline: Timeout", 0, 0, 15 * time.Millisecond, false},
	} {
		for _, batched := range []bool{false, true} {
			name := fmt.Sprintf("%s/batched=%v", tt.name, batched)
			ro := Options{Timeout: timeout, MaxTimeout: tt.maxTimeout}
			s := New(client, ro)
			if batched {
				s = mustBatched(t, client, ro, BatchOptions{})
				t.Cleanup(func() { _ = s.Close() })
			}
			p.Set(faultproxy.Fault{})
			if err := s.Ping(t.Context()); err != nil {
				t.Fatal(err)
			}
			p.Set(faultproxy.Fault{Latency: tt.latency})
			req := storetest.Req("slow/"+name, 2, 1)
			for i, wantAllowed := range []bool{true, true, false} {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tt.ctxTimeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				}
				allowed, err := s.Take(ctx, storetest.T0, []window.Counter{req}, make([]window.Result, 1))
				cancel()
				switch {
				case tt.decided && (err != nil || allowed != wantAllowed):
					t.Errorf("%s: Take #%d = %v, %v, want %v from Redis", name, i+1, allowed, err, wantAllowed)
				case !tt.decided && !errors.Is(err, window.ErrStore):
					t.Errorf("%s: Take #%d = %v, %v, want a store error", name, i+1, allowed, err)
				}
				if !tt.decided {
					break
				}
			}
		}
	}
}

// TestBatchedTakeStopsWaitingAtItsDeadline: behind a Redis that never
// answers (a blackhole), a Take with a short deadline queued behind a call
// with a long one ends by its own deadline, whether it waits in the queue
// or for room in it: the queue never holds a caller past its deadline.
// Once Redis answers again, the batcher still decides correctly.
func TestBatchedTakeStopsWaitingAtItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tt := range []struct {
		name     string
		maxBatch int // the queue holds Workers*MaxBatch = maxBatch
	}{
		{"waiting in the queue", 64},
		{"waiting for room in the queue", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := faultproxy.Start(t.Context(), srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			s := mustBatched(t, boundedClient(t, p.Addr()), Options{Timeout: time.Second}, BatchOptions{Workers: 1, MaxBatch: tt.maxBatch})
			t.Cleanup(func() { _ = s.Close() })
			if err := s.Ping(t.Context()); err != nil {
				t.Fatal(err)
			}
			p.Set(faultproxy.Fault{Blackhole: true})
			take := func(ctxTimeout time.Duration, key string) (bool, error) {
				ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
				defer cancel()
				return s.Take(ctx, storetest.T0, []window.Counter{storetest.Req(key, 1, 1)}, make([]window.Result, 1))
			}
			// Two long callers: one in flight, one queued (filling a queue
			// of one).
			long := make(chan error, 2)
			for i, placed := range []func() bool{
				func() bool { return s.batch.inFlight.Load() == 1 }, // the one worker sent it
				func() bool { return len(s.batch.queue) == 1 },      // behind it, with no worker free
			} {
				go func() { _, err := take(5*time.Second, fmt.Sprintf("long%d/%s", i, tt.name)); long <- err }()
				if err := pollUntil(5*time.Second, placed); err != nil {
					t.Fatalf("long Take #%d not in place: %v", i+1, err)
				}
			}
			const n, short = 50, 200 * time.Millisecond
			took := make(chan time.Duration, n)
			for i := range n {
				go func() {
					start := time.Now()
					if _, err := take(short, fmt.Sprintf("short%d/%s", i, tt.name)); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, window.ErrStore) {
						t.Errorf("short Take = %v, want a store deadline error", err)
					}
					took <- time.Since(start)
				}()
			}
			var slowest time.Duration
			for range n {
				slowest = max(slowest, <-took)
			}
			// Each should end at 9/10 of 200ms; before, each waited for the
			// long call in flight, 4.5s.
			if slowest > short+500*time.Millisecond {
				t.Errorf("slowest of %d Takes with a %v deadline behind a hung call took %v", n, short, slowest)
			}
			p.Set(faultproxy.Fault{})
			for range 2 {
				if err := <-long; err != nil {
					t.Errorf("long Take after the blackhole lifted = %v, want an answer", err)
				}
			}
			key := "after/" + tt.name
			for i, want := range []bool{true, false} {
				if allowed, err := take(5*time.Second, key); err != nil || allowed != want {
					t.Errorf("Take #%d after the blackhole = %v, %v, want %v", i+1, allowed, err, want)
				}
			}
		})
	}
}
