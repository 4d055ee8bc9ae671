package window_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestRedisTakeHonoursDeadline: a Take against a redis-server that hangs
// (SIGSTOP) returns when its bound passes, not at go-redis's own read
// timeout: the store's Timeout, or nine tenths of the way to the context's
// deadline when that comes first; batched or not.
func TestRedisTakeHonoursDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	ro := window.RedisOptions{Timeout: 50 * time.Millisecond}
	stores := map[string]*window.Redis{
		"plain":   window.NewRedis(client, ro),
		"batched": window.NewBatchedRedis(client, ro, window.BatchOptions{}),
	}
	t.Cleanup(func() { _ = stores["batched"].Close() })
	for _, s := range stores {
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	pid := srv.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
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
			_, err := s.Take(ctx, t0, []window.Request{req("paused", 10, 1)}, make([]window.Result, 1))
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
