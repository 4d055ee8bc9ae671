package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelTimeout bounds the wait for the replica to sync and for every
	// sentinel to know the master, the replica and the other sentinels.
	sentinelTimeout = 30 * time.Second
	// sentinels is the number of redis-sentinel processes; the quorum is 2.
	sentinels = 3
)

// Sentinel is a monitored master with one replica and three redis-sentinel
// processes (quorum 2, down-after-milliseconds 1000, failover-timeout 3000),
// so that a failover completes within a few seconds of KillMaster.
//
// Master and Replica keep pointing at the processes they started as, also
// after a failover has swapped their roles.
type Sentinel struct {
	// MasterName is the name the sentinels monitor the master under.
	MasterName string
	// SentinelAddrs are the sentinels' "127.0.0.1:port" addresses.
	SentinelAddrs []string
	// Master is the initial master; Replica its replica (replicaof Master).
	Master, Replica *Server

	sentinels []*Server
}

// StartSentinel starts a master, a replica and three sentinels, and waits
// until the replica is in sync and every sentinel sees the master as up, the
// replica and the two other sentinels (the last takes about two seconds: the
// sentinels find each other through hello messages published every 2 s).
// All processes are killed in tb.Cleanup; on failure it calls tb.Fatal with
// the logs.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	bin := lookPath(tb, "redis-sentinel")
	s := &Sentinel{MasterName: "redistest"}
	// Redis 7 defaults to diskless full sync after a 5 s wait for more
	// replicas (repl-diskless-sync-delay); one replica needs no wait.
	s.Master = StartWith(tb, Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	_, masterPort, _ := net.SplitHostPort(s.Master.Addr)
	// The replica too: it is the master after a failover, and the old
	// master, demoted, syncs from it; until then it has no replica to
	// acknowledge writes (see redisstore.Options.WaitReplicas).
	s.Replica = StartWith(tb, Options{Args: []string{"--replicaof", "127.0.0.1", masterPort, "--repl-diskless-sync-delay", "0"}})

	ctx, cancel := context.WithTimeout(tb.Context(), sentinelTimeout)
	defer cancel()
	// The sentinels learn the replicas from the master's INFO, sent on
	// connect and then only every 10 s: start them after the replica is in.
	if err := poll(ctx, s.replicaInSync); err != nil {
		tb.Fatalf("redistest: replica %s not in sync: %v\n%s", s.Replica.Addr, err, s.logs())
	}

	for range sentinels {
		dir := tb.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		srv := start(tb, bin, dir, false, func(port int) ([]string, error) {
			// Rewritten per attempt: the sentinel rewrites its own config.
			cfg := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\n"+
				"sentinel down-after-milliseconds %[1]s 1000\n"+
				"sentinel failover-timeout %[1]s 3000\n"+
				"sentinel parallel-syncs %[1]s 1\n", s.MasterName, masterPort)
			if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
				return nil, err
			}
			return []string{conf,
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--save", "",
				"--appendonly", "no",
				"--daemonize", "no",
				"--dir", dir,
			}, nil
		}, "")
		s.sentinels = append(s.sentinels, srv)
		s.SentinelAddrs = append(s.SentinelAddrs, srv.Addr)
	}
	for _, srv := range s.sentinels {
		if err := poll(ctx, func(ctx context.Context) error { return s.sentinelReady(ctx, srv.Addr) }); err != nil {
			tb.Fatalf("redistest: sentinel %s not ready: %v\n%s", srv.Addr, err, s.logs())
		}
	}
	return s
}

// replicaInSync reports nil once the replica's link is up and the master
// lists it as online.
func (s *Sentinel) replicaInSync(ctx context.Context) error {
	v, err := do(ctx, s.Replica.Addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if st := infoField(asString(v), "master_link_status"); st != "up" {
		return fmt.Errorf("replica master_link_status:%s", st)
	}
	v, err = do(ctx, s.Master.Addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if slave := infoField(asString(v), "slave0"); !strings.Contains(slave, "state=online") {
		return fmt.Errorf("master slave0:%s", slave)
	}
	return nil
}

// sentinelReady reports nil once the sentinel at addr sees the master up,
// one connected replica and the other sentinels: what a failover needs.
func (s *Sentinel) sentinelReady(ctx context.Context, addr string) error {
	v, err := do(ctx, addr, "SENTINEL", "MASTER", s.MasterName)
	if err != nil {
		return err
	}
	m := pairs(v)
	if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
		return fmt.Errorf("master flags=%s num-slaves=%s num-other-sentinels=%s",
			m["flags"], m["num-slaves"], m["num-other-sentinels"])
	}
	v, err = do(ctx, addr, "SENTINEL", "REPLICAS", s.MasterName)
	if err != nil {
		return err
	}
	replicas, _ := v.([]any)
	for _, r := range replicas {
		if r := pairs(r); r["flags"] != "slave" || r["master-link-status"] != "ok" {
			return fmt.Errorf("replica %s:%s flags=%s master-link-status=%s", r["ip"], r["port"], r["flags"], r["master-link-status"])
		}
	}
	return nil
}

// FailoverClient returns a go-redis client that finds the master through the
// sentinels (redis.NewFailoverClient) and follows failovers; it is closed in
// tb.Cleanup.
func (s *Sentinel) FailoverClient(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: s.SentinelAddrs,
		Protocol:      2,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// KillMaster stops the initial master process (SIGKILL). The sentinels mark
// it down after about 1 s and promote the replica a few seconds later; use
// WaitForNewMaster to wait for that.
func (s *Sentinel) KillMaster() { s.Master.Stop() }

// WaitForNewMaster polls the sentinels' SENTINEL get-master-addr-by-name
// until one of them reports an address other than old ("127.0.0.1:port"),
// and returns it. It returns an error, with the last answer, when ctx is
// done first.
func (s *Sentinel) WaitForNewMaster(ctx context.Context, old string) (string, error) {
	var addr string
	err := poll(ctx, func(ctx context.Context) error {
		var last error
		for _, sa := range s.SentinelAddrs {
			v, err := do(ctx, sa, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
			if err != nil {
				last = err
				continue
			}
			hp, _ := v.([]any)
			if len(hp) != 2 {
				last = fmt.Errorf("sentinel %s: get-master-addr-by-name = %v", sa, v)
				continue
			}
			got := net.JoinHostPort(asString(hp[0]), asString(hp[1]))
			if got != old {
				addr = got
				return nil
			}
			last = fmt.Errorf("sentinel %s still reports %s", sa, got)
		}
		return last
	})
	if err != nil {
		return "", fmt.Errorf("redistest: wait for new master of %s: %w", s.MasterName, err)
	}
	return addr, nil
}

// logs concatenates all processes' logs for failure messages.
func (s *Sentinel) logs() string {
	var b strings.Builder
	for _, srv := range append([]*Server{s.Master, s.Replica}, s.sentinels...) {
		fmt.Fprintf(&b, "--- log of %s ---\n%s", srv.Addr, srv.Log())
	}
	return b.String()
}
