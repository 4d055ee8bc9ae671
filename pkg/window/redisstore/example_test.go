package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// exampleRedis starts a throwaway redis-server for an example, which has no
// testing.T to hand to redistest.Start, so that the examples run against a
// real server as the tests do. It prints why it failed, which fails the
// example's Output, and returns "" then.
func exampleRedis() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "redisstore-example")
	if err != nil {
		fmt.Println(err)
		return "", nil
	}
	srv, err := redistest.Launch(context.Background(), redistest.Options{Dir: dir})
	if err != nil {
		fmt.Println(err)
		os.RemoveAll(dir)
		return "", nil
	}
	return srv.Addr, func() { srv.Stop(); os.RemoveAll(dir) }
}

// A store over one Redis node: one script call per Take. The client never
// retries (a retried script could count twice) and lets the store's
// deadline bound each call. The second Take finds the counter full: it is
// denied and counts nothing.
func ExampleNew() {
	addr, stop := exampleRedis() // a redis-server, "localhost:6379" in production
	if stop == nil {
		return
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{Timeout: time.Second})
	key := window.AppendKeyHead(nil, "ratelimit", "edge")
	key = window.AppendKeyEnd(window.AppendKeyEntry(key, "api_key", "alice"))
	reqs := []window.Counter{{Key: string(key), Limit: 1, Size: time.Hour, Hits: 1}}
	res := make([]window.Result, len(reqs))
	now := time.Now()
	for range 2 {
		allowed, err := store.Take(context.Background(), now, reqs, res)
		fmt.Println(allowed, res[0].Count, err)
	}
	// Output:
	// true 1 <nil>
	// false 1 <nil>
}

// A batched store, over one node, Sentinel or a cluster (with several
// addresses, NewUniversalClient makes a cluster client): concurrent Takes
// share script calls, on a cluster one per node. Close stops its workers.
func ExampleNewBatched() {
	addr, stop := exampleRedis()
	if stop == nil {
		return
	}
	defer stop()
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewBatched(client, redisstore.Options{Timeout: time.Second}, redisstore.BatchOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if err := store.Ping(context.Background()); err != nil {
		fmt.Println(err)
	}
	key := window.AppendKeyHead(nil, "ratelimit", "edge")
	key = window.AppendKeyEnd(window.AppendKeyEntry(key, "remote_address", "10.0.0.1"))
	reqs := []window.Counter{{Key: string(key), Limit: 100, Size: time.Minute, Hits: 3}}
	res := make([]window.Result, len(reqs))
	allowed, err := store.Take(context.Background(), time.Now(), reqs, res)
	fmt.Println(allowed, res[0].Count, err)
	// Output: true 3 <nil>
}
