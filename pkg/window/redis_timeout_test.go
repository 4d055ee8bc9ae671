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
// (SIGSTOP) returns when its context's deadline passes, not at go-redis's
// own read timeout.
func TestRedisTakeHonoursDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := window.NewRedis(client)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := srv.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	for _, name := range []string{"pooled connection", "again"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		start := time.Now()
		_, err := s.Take(ctx, t0, []window.Request{req("paused", 10, 1)}, make([]window.Result, 1))
		d := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("%s: Take against a stopped process succeeded", name)
		}
		if d > 200*time.Millisecond {
			t.Errorf("%s: Take with a 20ms deadline took %v, want < 200ms", name, d)
		}
	}
}
