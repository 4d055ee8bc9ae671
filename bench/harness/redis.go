package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
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
	// FLUSHDB of a million keys (scenario million) takes seconds on a busy machine: more than go-redis's default
	// 3 s read timeout.
	return &redisServer{Server: s, client: redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1,
		ReadTimeout: time.Minute})}, nil
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

// redisNodes are the redis-server processes that hold one scenario's counters: the harness's single server, or
// the masters of its cluster. Their figures add up: CPU, commands, memory and bytes of all of them.
type redisNodes []*redisServer

// info returns the sum of the nodes' INFO figures.
func (ns redisNodes) info(ctx context.Context) (redisInfo, error) {
	sum := redisInfo{calls: map[string]uint64{}}
	for _, n := range ns {
		info, err := n.info(ctx)
		if err != nil {
			return redisInfo{}, fmt.Errorf("%s: %w", n.Addr, err)
		}
		sum.add(info)
	}
	return sum, nil
}

// flush empties every node (FLUSHDB: a cluster node holds only database 0).
func (ns redisNodes) flush(ctx context.Context) error {
	for _, n := range ns {
		if err := n.flush(ctx); err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
	}
	return nil
}

func (ns redisNodes) addrs() []string {
	a := make([]string, len(ns))
	for i, n := range ns {
		a[i] = n.Addr
	}
	return a
}

func (ns redisNodes) stop() {
	for _, n := range ns {
		n.stop()
	}
}

// redisOf returns the processes holding sc's counters as run: none for a stand-in run or a server without Redis.
func (b *bench) redisOf(sc scenario) redisNodes {
	switch {
	case b.o.standIn:
		return nil
	case sc.Store == "redis" && b.redis != nil:
		return redisNodes{b.redis}
	case sc.Store == "cluster":
		return b.cluster
	}
	return nil
}

// allRedis returns every redis-server the harness started.
func (b *bench) allRedis() redisNodes {
	all := slices.Clone(b.cluster)
	if b.redis != nil {
		all = append(all, b.redis)
	}
	return all
}

func (r *redisServer) stop() {
	if r == nil {
		return
	}
	_ = r.client.Close()
	r.Stop()
}
