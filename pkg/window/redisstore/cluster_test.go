package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// clusterClient returns a cluster client configured for counting:
// no retries, deadlines from the context.
func clusterClient(t *testing.T, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// clusterStore starts a 3-master cluster and returns it with a client, a
// store over that client with its script loaded, and perNode hash tags on
// each master (tags[i] live on master i).
func clusterStore(t *testing.T, perNode int) (*redistest.Cluster, *redis.ClusterClient, *Store, [][]string) {
	t.Helper()
	c := redistest.StartCluster(t, 3)
	cc := clusterClient(t, c)
	s := New(cc, Options{})
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, cc, s, tagsByNode(t, cc, c, perNode)
}

// tagsByNode returns, for each master in c.Addrs order, n descriptor names
// whose keys (from req) hash to a slot that master serves, each on its own
// slot.
func tagsByNode(t *testing.T, cc *redis.ClusterClient, c *redistest.Cluster, n int) [][]string {
	t.Helper()
	shards, err := cc.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	owner := make([]string, 16384)
	for _, sh := range shards {
		addr := ""
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				addr = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			}
		}
		for _, r := range sh.Slots {
			for i := r.Start; i <= r.End; i++ {
				owner[i] = addr
			}
		}
	}
	out := make([][]string, len(c.Addrs))
	seen := map[uint16]bool{}
	for i := 0; ; i++ {
		name := fmt.Sprintf("d%d", i)
		slot := slot(storetest.Req(name, 1, 1).Key)
		if seen[slot] {
			continue
		}
		done := true
		for j, addr := range c.Addrs {
			if owner[slot] == addr && len(out[j]) < n {
				out[j] = append(out[j], name)
				seen[slot] = true
			}
			done = done && len(out[j]) == n
		}
		if done {
			return out
		}
	}
}

// TestClusterRoundTrips: a request whose counters share a slot is one round
// trip, as on a single node; one over three nodes is one parallel step of
// three round trips, one to each node.
func TestClusterRoundTrips(t *testing.T) {
	t.Parallel()
	_, _, s, tags := clusterStore(t, 1)
	one := storetest.Req(tags[0][0], 10, 1)
	hour := one
	hour.Size = time.Hour
	storetest.Take(t, s, storetest.T0, one, hour)
	if got := s.RoundTrips(); got != 1 {
		t.Errorf("RoundTrips = %d after a one-slot Take, want 1", got)
	}
	ok, _ := storetest.Take(t, s, storetest.T0, storetest.Req(tags[0][0], 10, 1), storetest.Req(tags[1][0], 10, 1), storetest.Req(tags[2][0], 10, 1))
	if !ok {
		t.Errorf("three-slot Take denied, want allowed")
	}
	if got := s.RoundTrips(); got != 4 {
		t.Errorf("RoundTrips = %d after a three-slot Take, want 4 (1, then one to each node)", got)
	}
}

// TestClusterRecoversFromFlushedScripts: after SCRIPT FLUSH, a multi-slot
// Take sends the source to the nodes that answer NOSCRIPT (nothing ran
// there), one more round trip each, and counts once; the source it sent is
// cached, so the next Take is one round trip per node again.
func TestClusterRecoversFromFlushedScripts(t *testing.T) {
	t.Parallel()
	_, cc, s, tags := clusterStore(t, 1)
	ctx := context.Background()
	if err := cc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	three := func(hits uint64) []window.Counter {
		return []window.Counter{storetest.Req(tags[0][0], 2, hits), storetest.Req(tags[1][0], 2, hits), storetest.Req(tags[2][0], 2, hits)}
	}
	for i, wantTrips := range []uint64{6, 3} {
		before := s.RoundTrips()
		if ok, _ := storetest.Take(t, s, storetest.T0, three(1)...); !ok {
			t.Fatalf("Take %d after SCRIPT FLUSH denied, want allowed", i)
		}
		if got := s.RoundTrips() - before; got != wantTrips {
			t.Errorf("Take %d after SCRIPT FLUSH: %d round trips, want %d", i, got, wantTrips)
		}
	}
	_, res := storetest.Take(t, s, storetest.T0, three(0)...)
	for i, r := range res {
		if r.Count != 2 {
			t.Errorf("counter %d = %d after two Takes, want 2 (each ran once)", i, r.Count)
		}
	}
}

// TestClusterExactUnderConcurrency: two replicas (stores with their own
// clients) and many goroutines sending requests with counters on three
// nodes never admit more than a limit, and a denied request leaves no hits
// behind once its Take has returned; unbatched and batched.
func TestClusterExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			t.Parallel()
			testClusterExact(t, batched)
		})
	}
}

func testClusterExact(t *testing.T, batched bool) {
	c := redistest.StartCluster(t, 3)
	probe := clusterClient(t, c)
	tags := tagsByNode(t, probe, c, 3)
	stores := []*Store{clusterReplica(t, c, batched), clusterReplica(t, c, batched)}
	const workers, each = 16, 20

	hammer := func(reqs []window.Counter) int {
		return storetest.AdmitConcurrently(t, workers, each, storetest.Taking(storetest.T0, reqs, stores...))
	}
	counts := func(reqs []window.Counter) []uint64 {
		check := make([]window.Counter, len(reqs))
		for i, r := range reqs {
			r.Hits = 0
			check[i] = r
		}
		_, res := storetest.Take(t, stores[0], storetest.T0, check...)
		out := make([]uint64, len(res))
		for i, r := range res {
			out[i] = r.Count
		}
		return out
	}

	t.Run("one tight counter", func(t *testing.T) {
		const limit = 100
		reqs := []window.Counter{storetest.Req(tags[0][0], limit, 1), storetest.Req(tags[1][0], 1_000_000, 1), storetest.Req(tags[2][0], 1_000_000, 1)}
		if got := hammer(reqs); got != limit {
			t.Errorf("admitted %d of %d, want exactly %d", got, workers*each, limit)
		}
		for i, n := range counts(reqs) {
			if n != limit {
				t.Errorf("counter %d = %d, want %d (only admitted requests count)", i, n, limit)
			}
		}
	})
	t.Run("two tight counters", func(t *testing.T) {
		// Refunds can make a counter deny while its hits are in flight:
		// at most the limit, and every counter equals the admitted count.
		reqs := []window.Counter{storetest.Req(tags[0][1], 60, 1), storetest.Req(tags[1][1], 80, 1), storetest.Req(tags[2][1], 1_000_000, 1)}
		got := hammer(reqs)
		if got > 60 || got == 0 {
			t.Errorf("admitted %d of %d, want 1..60", got, workers*each)
		}
		for i, n := range counts(reqs) {
			if n != uint64(got) {
				t.Errorf("counter %d = %d, want %d (the admitted count)", i, n, got)
			}
		}
		t.Logf("admitted %d with limits 60 and 80", got)
	})
	t.Run("one slot per request", func(t *testing.T) {
		// Each worker's requests lie on one slot (a minute and an hour
		// counter of one tag), the workers' on slots of every node: each
		// batch is one script call per node.
		const limit = 50
		before := stores[0].RoundTrips() + stores[1].RoundTrips()
		var admitted [3]atomic.Int64
		storetest.AdmitConcurrently(t, workers, each, func(w int) (bool, error) {
			node := w % 3
			minute, hour := storetest.Req(tags[node][2], limit, 1), storetest.Req(tags[node][2], 1_000_000, 1)
			hour.Size = time.Hour
			reqs := []window.Counter{minute, hour}
			ok, err := stores[w%2].Take(context.Background(), storetest.T0, reqs, make([]window.Result, 2))
			if ok {
				admitted[node].Add(1)
			}
			return ok, err
		})
		for node := range admitted {
			if got := admitted[node].Load(); got != limit {
				t.Errorf("node %d's counter admitted %d, want exactly %d", node, got, limit)
			}
		}
		rt := stores[0].RoundTrips() + stores[1].RoundTrips() - before
		t.Logf("%d decisions in %d round trips (%.3f per decision)", workers*each, rt, float64(rt)/float64(workers*each))
		if batched && rt >= workers*each {
			t.Errorf("%d round trips for %d concurrent decisions: nothing was coalesced", rt, workers*each)
		}
	})
}

// clusterReplica returns a store over a client of its own to c, as a
// replica of the sidecar has: batched or not, with a timeout generous
// enough for a loaded machine (these tests count, they do not time).
func clusterReplica(t *testing.T, c *redistest.Cluster, batched bool) *Store {
	t.Helper()
	o := Options{Timeout: 5 * time.Second}
	if !batched {
		return New(clusterClient(t, c), o)
	}
	s := mustBatched(t, clusterClient(t, c), o, BatchOptions{})
	t.Cleanup(func() { s.Close() })
	return s
}

// TestClusterBatchedRoundTrips: batched on a cluster, a lone request is
// still one round trip, and a lone request over three nodes' slots one to
// each node.
func TestClusterBatchedRoundTrips(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	tags := tagsByNode(t, clusterClient(t, c), c, 1)
	s := clusterReplica(t, c, true)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		before := s.RoundTrips()
		ok, res := storetest.Take(t, s, storetest.T0, storetest.Req(tags[0][0], 2, 1))
		if ok != (i < 2) || res[0].Count != uint64(min(i+1, 2)) {
			t.Errorf("call %d: %v %+v", i, ok, res[0])
		}
		if got := s.RoundTrips() - before; got != 1 {
			t.Errorf("lone call %d: %d round trips, want 1", i, got)
		}
	}
	before := s.RoundTrips()
	if ok, _ := storetest.Take(t, s, storetest.T0, storetest.Req(tags[0][0], 10, 1), storetest.Req(tags[1][0], 10, 1), storetest.Req(tags[2][0], 10, 1)); !ok {
		t.Errorf("three-slot Take denied, want allowed")
	}
	if got := s.RoundTrips() - before; got != 3 {
		t.Errorf("three-slot Take: %d round trips, want 3 (one to each node)", got)
	}
}

// TestClusterNodeDown: with one master stopped, counters on the others keep
// working, and a request touching both reports which of its counters failed.
func TestClusterNodeDown(t *testing.T) {
	t.Parallel()
	c, _, s, tags := clusterStore(t, 1)
	ctx := context.Background()
	up, down := tags[0][0], tags[2][0]
	storetest.Take(t, s, storetest.T0, storetest.Req(up, 3, 1), storetest.Req(down, 3, 1)) // the client knows every node now
	c.Node(2).Stop()

	call := func(reqs ...window.Counter) (bool, []window.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		res := make([]window.Result, len(reqs))
		ok, err := s.Take(ctx, storetest.T0, reqs, res)
		return ok, res, err
	}
	ok, res, err := call(storetest.Req(up, 3, 1), storetest.Req(down, 3, 1))
	var pe *window.PartialError
	if !errors.As(err, &pe) || !errors.Is(err, window.ErrStore) {
		t.Fatalf("Take over a stopped node = %v, %v, want a *PartialError wrapping ErrStore", ok, err)
	}
	if len(pe.Failed) != 1 || pe.Failed[0] != 1 {
		t.Errorf("Failed = %v, want [1]", pe.Failed)
	}
	if !ok || res[0].Count != 2 {
		t.Errorf("healthy counter: allowed %v count %d, want true 2", ok, res[0].Count)
	}
	if ok, res, err := call(storetest.Req(up, 3, 1)); err != nil || !ok || res[0].Count != 3 {
		t.Errorf("Take on a healthy node = %v %d, %v, want true 3, nil", ok, res[0].Count, err)
	}
	// The healthy counter is full now: denied, and the failed one named.
	if ok, res, err := call(storetest.Req(up, 3, 1), storetest.Req(down, 3, 1)); ok || !errors.As(err, &pe) || res[0].Count != 3 || !res[0].Over {
		t.Errorf("Take with a full healthy counter = %v %+v, %v, want false, over at 3, a *PartialError", ok, res[0], err)
	}
	_, _, err = call(storetest.Req(down, 3, 1))
	if err == nil || !errors.Is(err, window.ErrStore) || errors.As(err, &pe) {
		t.Errorf("Take on the stopped node only = %v, want an ErrStore that is not partial", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping with two of three masters up = %v, want nil", err)
	}
}
