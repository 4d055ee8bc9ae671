package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestRedisTakeHonoursDeadline: a Take against a redis-server that hangs
// (SIGSTOP) returns when its bound passes, not at go-redis's own read
// timeout: the store's Timeout, or nine tenths of the way to the context's
// deadline when that comes first; batched or not.
func TestRedisTakeHonoursDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.BoundedClient(t)
	ro := Options{Timeout: 50 * time.Millisecond}
	stores := map[string]*Store{
		"plain":   New(client, ro),
		"batched": mustBatched(t, client, ro, BatchOptions{}),
	}
	t.Cleanup(func() { _ = stores["batched"].Close() })
	for _, s := range stores {
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause(t)
	for name, s := range stores {
		for _, tt := range []struct {
			ctxTimeout time.Duration // 0: no deadline
			want       time.Duration // the bound
		}{
			{0, 50 * time.Millisecond},                     // the store's Timeout
			{time.Second, 50 * time.Millisecond},           // the store's Timeout, sooner
			{20 * time.Millisecond, 18 * time.Millisecond}, // 9/10 of the caller's
			{20 * time.Millisecond, 18 * time.Millisecond}, // again, on a pooled connection
		} {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctxTimeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
			}
			start := time.Now()
			_, err := s.Take(ctx, storetest.T0, []window.Request{storetest.Req("paused", 10, 1)}, make([]window.Result, 1))
			d := time.Since(start)
			cancel()
			if err == nil {
				t.Fatalf("%s, ctx timeout %v: Take against a stopped process succeeded", name, tt.ctxTimeout)
			}
			// Not at once and not much later than the bound (scheduling
			// slack); the clock reads in and out of Take differ a little.
			if d < tt.want-5*time.Millisecond || d > tt.want+150*time.Millisecond {
				t.Errorf("%s, ctx timeout %v: Take returned after %v, want about %v", name, tt.ctxTimeout, d, tt.want)
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
		_, _ = s.Take(context.Background(), storetest.T0, []window.Request{storetest.Req("paused", 10, 1)}, make([]window.Result, 1))
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
