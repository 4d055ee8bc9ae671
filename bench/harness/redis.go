package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/proc"
)

// redisServer is the harness's own redis-server: nothing else uses it, so its counters are the sidecar's doing
// plus the harness's INFO calls, which are left out of the figures.
type redisServer struct {
	proc   *proc.Process
	addr   string
	client *redis.Client
}

func startRedis(ctx context.Context, bin, logDir string) (*redisServer, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	log, err := os.Create(filepath.Join(logDir, "redis.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child holds its own descriptor
	p, err := startProc("redis-server", log, nil, nil, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return nil, err
	}
	r := &redisServer{proc: p, addr: "127.0.0.1:" + strconv.Itoa(port)}
	r.client = redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1, PoolSize: 1})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.client.Ping(ctx).Err()
		if err == nil {
			return r, nil
		}
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			r.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING: %w (see %s)", r.addr, err, log.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) url() string { return "redis://" + r.addr + "/0" }

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
	_ = r.proc.Stop(5 * time.Second)
}
