package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// redisServer is the harness's own redis-server: nothing else uses it, so its counters are the sidecar's doing
// plus the harness's INFO calls, which are left out of the figures.
type redisServer struct {
	*redistest.Server
	client *redis.Client
}

// startRedis starts bin on a free loopback port with persistence off, its log in logDir/redis.log.
func startRedis(ctx context.Context, bin, logDir string) (*redisServer, error) {
	// A fresh log per harness run: the starter appends, for a server that restarts.
	if err := os.Remove(filepath.Join(logDir, "redis.log")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	s, err := redistest.Launch(ctx, redistest.Options{Bin: bin, Dir: logDir})
	if err != nil {
		return nil, err
	}
	return &redisServer{Server: s, client: redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})}, nil
}

func (r *redisServer) info(ctx context.Context) (redisInfo, error) {
	s, err := r.client.Info(ctx, "all").Result()
	if err != nil {
		return redisInfo{}, fmt.Errorf("redis INFO: %w", err)
	}
	return parseInfo(s)
}

func (r *redisServer) flush(ctx context.Context) error {
	return r.client.FlushDB(ctx).Err()
}

func (r *redisServer) stop() {
	if r == nil {
		return
	}
	_ = r.client.Close()
	r.Stop()
}
