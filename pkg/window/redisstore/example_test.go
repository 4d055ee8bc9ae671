package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// A store over one Redis node: one script call per Take. The client never
// retries (a retried script could count twice) and lets the store's
// deadline bound each call.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{Timeout: 50 * time.Millisecond})
	key := window.AppendKeyHead(nil, "ratelimit", "edge")
	key = window.AppendKeyEnd(window.AppendKeyEntry(key, "api_key", "alice"))
	reqs := []window.Request{{Key: string(key), Limit: 100, Size: time.Minute, Hits: 1}}
	res := make([]window.Result, len(reqs))
	allowed, err := store.Take(context.Background(), time.Now(), reqs, res)
	fmt.Println(allowed, res[0].Count, err)
}

// A batched store, over one node, Sentinel or a cluster (with several
// addresses, NewUniversalClient makes a cluster client): concurrent Takes
// share script calls, on a cluster one per node.
func ExampleNewBatched() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"localhost:6379"}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewBatched(client, redisstore.Options{Timeout: 50 * time.Millisecond}, redisstore.BatchOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if err := store.Ping(context.Background()); err != nil {
		fmt.Println(err)
	}
}
