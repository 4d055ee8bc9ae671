package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds redis-cli --cluster create plus the wait for
// cluster_state:ok on every node.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of masters only (no replicas), one redis-server
// process per master, each with its own directory and nodes.conf.
//
// The nodes run with cluster-node-timeout 1000 (ms) and
// cluster-require-full-coverage no, so that after a master is stopped the
// slots of the other masters keep serving: a test can check that only the
// stopped master's keys fail.
type Cluster struct {
	// Addrs are the masters' "127.0.0.1:port" addresses, in Node order.
	Addrs []string

	nodes []*Server
}

// StartCluster starts masters cluster-enabled redis-server processes (at
// least 3, the minimum of redis-cli --cluster create), joins them with
// redis-cli --cluster create (slots split evenly, 0 replicas) and waits until
// CLUSTER INFO reports cluster_state:ok on every node. All processes are
// killed in tb.Cleanup; on failure it calls tb.Fatal with redis-cli's output
// and the nodes' logs.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: StartCluster(%d): redis-cli --cluster create needs at least 3 masters", masters)
	}
	cli := lookPath(tb, "redis-cli")
	c := &Cluster{}
	for range masters {
		s := startServer(tb, Options{Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to the node's own --dir
			"--cluster-node-timeout", "1000",
			"--cluster-require-full-coverage", "no",
		}}, true)
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}

	ctx, cancel := context.WithTimeout(tb.Context(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, out, c.logs())
	}
	for _, s := range c.nodes {
		err := poll(ctx, func(ctx context.Context) error {
			v, err := do(ctx, s.Addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if st := infoField(asString(v), "cluster_state"); st != "ok" {
				return fmt.Errorf("cluster_state:%s", st)
			}
			return nil
		})
		if err != nil {
			tb.Fatalf("redistest: cluster node %s not ok: %v\n%s", s.Addr, err, c.logs())
		}
	}
	return c
}

// Client returns a go-redis cluster client seeded with all masters, speaking
// RESP2 as the sidecar's client does, closed in tb.Cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Protocol: 2})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns the i-th master (0 <= i < len(Addrs)), for example to Stop it
// and observe the failure of its slots. It panics if i is out of range.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// logs concatenates the nodes' logs for failure messages.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, s := range c.nodes {
		fmt.Fprintf(&b, "--- log of %s ---\n%s", s.Addr, s.Log())
	}
	return b.String()
}
