package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds redis-cli --cluster create plus the wait for
// cluster_state:ok on every node.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster, one redis-server process per node, each with
// its own directory and nodes.conf: masters only (StartCluster), or each
// master with one replica (StartClusterWithReplicas).
//
// The nodes run with cluster-node-timeout 1000 (ms) and
// cluster-require-full-coverage no, so that after a master is stopped the
// slots of the other masters keep serving: a test can check that only the
// stopped master's keys fail. With replicas, a stopped master's replica
// takes its slots over after about two seconds.
type Cluster struct {
	// Addrs are the masters' "127.0.0.1:port" addresses, in Node order, as
	// the cluster was created (a failover does not change them).
	Addrs []string

	nodes    []*Server
	replicas []*Server // replicas[i] replicates nodes[i]; nil without replicas
}

// StartCluster starts masters cluster-enabled redis-server processes (at
// least 3, the minimum of redis-cli --cluster create), joins them with
// redis-cli --cluster create (slots split evenly, 0 replicas) and waits until
// CLUSTER INFO reports cluster_state:ok on every node. All processes are
// killed in tb.Cleanup; on failure it calls tb.Fatal with redis-cli's output
// and the nodes' logs.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	return startCluster(tb, masters, false)
}

// StartClusterWithReplicas is StartCluster with one replica per master
// (2*masters processes, redis-cli --cluster create --cluster-replicas 1),
// for failover tests: it also waits until every replica's link to its
// master is up. Replica(i) is the replica of Node(i).
func StartClusterWithReplicas(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	return startCluster(tb, masters, true)
}

func startCluster(tb testing.TB, masters int, replicated bool) *Cluster {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: StartCluster(%d): redis-cli --cluster create needs at least 3 masters", masters)
	}
	cli := lookPath(tb, "redis-cli")
	n, perMaster := masters, "0"
	if replicated {
		n, perMaster = 2*masters, "1"
	}
	c := &Cluster{}
	var all []*Server
	var addrs []string
	for range n {
		s := startServer(tb, Options{Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to the node's own --dir
			"--cluster-node-timeout", "1000",
			"--cluster-require-full-coverage", "no",
		}}, true)
		all = append(all, s)
		addrs = append(addrs, s.Addr)
	}
	c.nodes = all // for logs until the roles are known

	ctx, cancel := context.WithTimeout(tb.Context(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", perMaster, "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, out, c.logs())
	}
	for _, s := range all {
		if err := poll(ctx, func(ctx context.Context) error { return nodeReady(ctx, s.Addr) }); err != nil {
			tb.Fatalf("redistest: cluster node %s not ok: %v\n%s", s.Addr, err, c.logs())
		}
	}
	if err := c.assignRoles(ctx, all, masters, replicated); err != nil {
		tb.Fatalf("redistest: cluster roles: %v\n%s", err, c.logs())
	}
	// No spare capacity: a go-redis cluster client appends the nodes it
	// discovers to the slice it was given, and two clients given Addrs
	// would otherwise write to the same array.
	c.Addrs = slices.Clip(c.Addrs)
	return c
}

// nodeReady reports nil once the node at addr sees cluster_state:ok and,
// for a replica, its link to its master is up.
func nodeReady(ctx context.Context, addr string) error {
	v, err := do(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if st := infoField(asString(v), "cluster_state"); st != "ok" {
		return fmt.Errorf("cluster_state:%s", st)
	}
	v, err = do(ctx, addr, "INFO", "replication")
	if err != nil {
		return err
	}
	info := asString(v)
	if infoField(info, "role") == "slave" && infoField(info, "master_link_status") != "up" {
		return fmt.Errorf("replica master_link_status:%s", infoField(info, "master_link_status"))
	}
	return nil
}

// assignRoles sorts all into c's masters, in the order they were started,
// and replicas, each at its master's index.
func (c *Cluster) assignRoles(ctx context.Context, all []*Server, masters int, replicated bool) error {
	if !replicated {
		c.nodes, c.Addrs = all, nil
		for _, s := range all {
			c.Addrs = append(c.Addrs, s.Addr)
		}
		return nil
	}
	ids := map[string]int{} // master node ID -> index in c.nodes
	var replicas []*Server
	var nodes []*Server
	for _, s := range all {
		v, err := do(ctx, s.Addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if infoField(asString(v), "role") == "slave" {
			replicas = append(replicas, s)
			continue
		}
		id, err := do(ctx, s.Addr, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		ids[asString(id)] = len(nodes)
		nodes = append(nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	if len(nodes) != masters || len(replicas) != masters {
		return fmt.Errorf("%d masters and %d replicas, want %d of each", len(nodes), len(replicas), masters)
	}
	c.nodes, c.replicas = nodes, make([]*Server, masters)
	for _, r := range replicas {
		v, err := do(ctx, r.Addr, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		master := ""
		for line := range strings.SplitSeq(asString(v), "\n") {
			if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "myself") {
				master = f[3]
			}
		}
		i, ok := ids[master]
		if !ok || c.replicas[i] != nil {
			return fmt.Errorf("replica %s follows %q, not one master of its own", r.Addr, master)
		}
		c.replicas[i] = r
	}
	return nil
}

// Client returns a go-redis cluster client seeded with all masters, speaking
// RESP2 as the sidecar's client does, closed in tb.Cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Protocol: 2})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns the i-th master as created (0 <= i < len(Addrs)), for
// example to Stop it and observe the failure of its slots, or its
// replica's failover. It panics if i is out of range.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Replica returns the replica of Node(i) in a cluster made by
// StartClusterWithReplicas, for example to promote it with CLUSTER
// FAILOVER. It panics if i is out of range or the cluster has no replicas.
func (c *Cluster) Replica(i int) *Server { return c.replicas[i] }

// logs concatenates the nodes' logs for failure messages.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, s := range append(slices.Clone(c.nodes), c.replicas...) {
		fmt.Fprintf(&b, "--- log of %s ---\n%s", s.Addr, s.Log())
	}
	return b.String()
}
