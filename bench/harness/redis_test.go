package main

import (
	"context"
	"testing"
)

// TestRedisCounters checks the harness's reading of a real redis-server: the commands a client makes between
// two INFO samples are the delta, and the harness's own INFO calls are not.
func TestRedisCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := startRedis(ctx, "redis-server", t.TempDir())
	if err != nil {
		t.Fatalf("startRedis: %v", err)
	}
	t.Cleanup(r.stop)

	before, err := r.info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := r.client.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.client.IncrBy(ctx, "a", 2).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.info(ctx); err != nil { // an extra INFO must not count
		t.Fatal(err)
	}
	after, err := r.info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	delta, sum := commandDelta(before.calls, after.calls, "info")
	if delta["set"] != 3 || delta["incrby"] != 1 || sum != 4 {
		t.Errorf("commandDelta() = %v, %d, want set 3, incrby 1, sum 4", delta, sum)
	}
	if after.usedMemory == 0 || after.cpuSeconds < before.cpuSeconds {
		t.Errorf("after: used_memory %d, cpu %v (before %v): want memory > 0 and cpu not decreasing",
			after.usedMemory, after.cpuSeconds, before.cpuSeconds)
	}
	if err := r.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after flush = %d, %v, want 0", n, err)
	}
}
