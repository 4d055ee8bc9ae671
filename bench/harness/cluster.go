package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// clusterMasters is the size of scenario cl's Redis Cluster: the fewest masters redis-cli --cluster create
// accepts, each with a third of the slots.
const clusterMasters = 3

// startCluster starts masters cluster-enabled redis-servers on loopback (logs in logDir/cluster-<i>/redis.log),
// joins them with redis-cli --cluster create (slots split evenly, no replicas) and waits until every node reports
// cluster_state:ok. The harness's INFO calls reach each node through its own plain client.
func startCluster(ctx context.Context, bin, logDir string, masters int) (nodes redisNodes, err error) {
	defer func() {
		if err != nil {
			nodes.stop()
		}
	}()
	for i := range masters {
		// A node's directory holds its nodes.conf: a stale one would make it rejoin the previous run's cluster.
		dir := filepath.Join(logDir, "cluster-"+strconv.Itoa(i))
		if err := os.RemoveAll(dir); err != nil {
			return nodes, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nodes, err
		}
		// The bus port is picked here: redistest.Launch checks only the client port, and the default bus
		// port (client port + 10000) may be taken.
		bus, err := proctest.FreePorts(1)
		if err != nil {
			return nodes, err
		}
		s, err := redistest.Launch(ctx, redistest.Options{Bin: bin, Dir: dir, Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus[0]), "--cluster-node-timeout", "5000",
		}})
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, &redisServer{Server: s,
			client: redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, PoolSize: 1})})
	}

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, nodes.addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(cctx, redisCLI(bin), args...).CombinedOutput(); err != nil {
		return nodes, fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range nodes {
		if err := waitClusterOK(cctx, n.client); err != nil {
			return nodes, fmt.Errorf("cluster node %s: %w", n.Addr, err)
		}
	}
	return nodes, nil
}

// redisCLI returns the redis-cli beside the redis-server bin, or the one on PATH.
func redisCLI(bin string) string {
	if p, err := exec.LookPath(bin); err == nil {
		cli := filepath.Join(filepath.Dir(p), "redis-cli")
		if _, err := os.Stat(cli); err == nil {
			return cli
		}
	}
	return "redis-cli"
}

// waitClusterOK polls CLUSTER INFO until the node reports cluster_state:ok.
func waitClusterOK(ctx context.Context, c *redis.Client) error {
	for {
		s, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(s, "cluster_state:ok") {
			return nil
		}
		if err == nil {
			err = errors.New("cluster_state is not ok")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
