package redisstore_test

import (
	"context"
	"errors"
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

// A batched store where the topology allows it: a cluster client is served
// unbatched.
func ExampleNewBatched() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"localhost:6379"}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	o := redisstore.Options{Timeout: 50 * time.Millisecond}
	store, err := redisstore.NewBatched(client, o, redisstore.BatchOptions{})
	if errors.Is(err, redisstore.ErrClusterBatch) {
		store = redisstore.New(client, o)
	}
	defer store.Close()
	if err := store.Ping(context.Background()); err != nil {
		fmt.Println(err)
	}
}
