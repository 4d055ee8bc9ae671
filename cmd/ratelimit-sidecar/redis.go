package main

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// newRedisClient makes the client for the counting path: no retries (a
// retried script can count twice) and deadlines from the request's context.
func newRedisClient(url string, timeout time.Duration) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis-url: %w", err)
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = max(timeout*10, time.Second)
	return redis.NewClient(opts), nil
}
