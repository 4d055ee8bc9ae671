package redisstore

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// These tests move a slot that holds their counters while two batched
// stores (two replicas of the sidecar) send load from several goroutines:
// by a reshard, by CLUSTER FAILOVER and by killing a master. Each load runs
// a few kinds of request, each with one tight counter on the moving slot;
// the load holds (gate) before it uses up the limits until the move is
// done, so the move always happens with load and room left, and it stops
// once every kind has been denied a while after the move. The Take timeout
// is generous (5 s): a timed-out call may have counted without being
// admitted, and these tests count.

const (
	moveLimit   = 300 // of each tight counter
	moveWorkers = 8
	moveBound   = 25 * time.Second // the whole load, however loaded the machine
)

// kind is one kind of request in a load, and what it got.
type kind struct {
	name                      string
	reqs                      []window.Counter // reqs[0] is the tight counter on the moving slot
	admitted, denied, failed  atomic.Int64
	deniedAfter, admittedMark atomic.Int64 // denials since the move; admitted when marked
}

// moveKinds returns the load's kinds on tag's slot, with near a tag on
// another slot of the same node and other a tag on another node: alone;
// two keys of the slot in one request; the slot's counter with a minute
// and an hour window (two keys, one slot); a request over two slots of one
// node and one over two nodes, whose other counter never denies.
func moveKinds(tag, near, other string) []*kind {
	key := func(i int) window.Counter {
		return window.Counter{Key: "test:{" + tag + "}:" + strconv.Itoa(i), Limit: moveLimit, Size: time.Minute, Hits: 1}
	}
	hour := key(2)
	hour.Size, hour.Limit = time.Hour, 1_000_000
	roomy := key(3)
	roomy.Limit = 1_000_000
	return []*kind{
		{name: "alone", reqs: []window.Counter{key(0)}},
		{name: "two keys of the slot", reqs: []window.Counter{key(1), roomy}},
		{name: "minute and hour", reqs: []window.Counter{key(2), hour}},
		{name: "over two nodes", reqs: []window.Counter{key(4), storetest.Req(other, 1_000_000, 1)}},
		{name: "two slots of one node", reqs: []window.Counter{key(5), storetest.Req(near, 1_000_000, 1)}},
	}
}

// moveLoad is a load running through stores until stop.
type moveLoad struct {
	kinds  []*kind
	moved  atomic.Bool // the move is done: the gate opens
	marked atomic.Bool // denials count towards the end from now
	stop   chan struct{}
	wg     sync.WaitGroup
}

// startLoad starts moveWorkers goroutines sending kinds through stores in
// turn. Before the move is done (moved), a worker waits whenever the
// admitted total passes gateAt of the limits.
func startLoad(t *testing.T, stores []*Store, kinds []*kind, gateAt float64) *moveLoad {
	l := &moveLoad{kinds: kinds, stop: make(chan struct{})}
	gate := int64(gateAt * float64(moveLimit*len(kinds)))
	for w := range moveWorkers {
		l.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if !l.moved.Load() && l.admitted() >= gate {
					time.Sleep(time.Millisecond)
					continue
				}
				k := kinds[i%len(kinds)]
				ok, err := stores[i%len(stores)].Take(context.Background(), storetest.T0, k.reqs, make([]window.Result, len(k.reqs)))
				switch {
				case err != nil:
					k.failed.Add(1)
				case ok:
					k.admitted.Add(1)
				default:
					k.denied.Add(1)
					if l.marked.Load() {
						k.deniedAfter.Add(1)
					}
				}
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

func (l *moveLoad) admitted() int64 {
	var n int64
	for _, k := range l.kinds {
		n += k.admitted.Load()
	}
	return n
}

// waitFor waits until the load's admitted total reaches n.
func (l *moveLoad) waitFor(t *testing.T, n int64) {
	t.Helper()
	if err := pollUntil(moveBound, func() bool { return l.admitted() >= n }); err != nil {
		t.Fatalf("load admitted %d, waiting for %d: %v", l.admitted(), n, err)
	}
}

// open marks the move done: the gate opens, each kind's admitted count so
// far is kept in admittedMark, and the load runs until every kind has been
// denied 20 times since, then ends.
func (l *moveLoad) open(t *testing.T) {
	t.Helper()
	for _, k := range l.kinds {
		k.admittedMark.Store(k.admitted.Load())
	}
	l.marked.Store(true)
	l.moved.Store(true)
	err := pollUntil(moveBound, func() bool {
		for _, k := range l.kinds {
			if k.deniedAfter.Load() < 20 {
				return false
			}
		}
		return true
	})
	l.end()
	if err != nil {
		t.Fatalf("load did not use up its limits: %v", err)
	}
}

func (l *moveLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// pollUntil polls cond every 5 ms for up to d.
func pollUntil(d time.Duration, cond func() bool) error {
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			return fmt.Errorf("not within %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// counter reads r's counter through s.
func counter(t *testing.T, s *Store, r window.Counter) uint64 {
	t.Helper()
	r.Hits = 0
	_, res := storetest.Take(t, s, storetest.T0, r)
	return res[0].Count
}

// nodeClient returns a plain client to one cluster node, for the commands
// that manage the cluster.
func nodeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// moveSetup starts a 3-master cluster with replicas and two batched stores,
// and returns them with the load's kinds (see moveKinds): the tag whose
// slot moves and near on master 0, other on master 1.
func moveSetup(t *testing.T) (*redistest.Cluster, []*Store, []*kind) {
	t.Helper()
	c := redistest.StartClusterWithReplicas(t, 3)
	tags := tagsByNode(t, clusterClient(t, c), c, 2)
	stores := []*Store{clusterReplica(t, c, true), clusterReplica(t, c, true)}
	for _, s := range stores {
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return c, stores, moveKinds(tags[0][0], tags[0][1], tags[1][0])
}

// TestClusterReshardUnderLoad moves the slot of the counters from master 0
// to master 1 by hand, as redis-cli --cluster reshard does but one key at a
// time with pauses, so the load meets every state of a migration: keys
// still on the source, ASK to the target for keys already moved, TRYAGAIN
// for a batched call whose keys are on both sides, and MOVED once the slot
// is assigned. Redis answers each of those before running the script, so
// the store sends the call again and every counter admits exactly its
// limit: no hit lost, none counted twice.
func TestClusterReshardUnderLoad(t *testing.T) {
	t.Parallel()
	c, stores, kinds := moveSetup(t)
	ctx := context.Background()
	id := slot(kinds[0].reqs[0].Key)
	src, dst := nodeClient(t, c.Addrs[0]), nodeClient(t, c.Addrs[1])
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(c.Addrs[1])

	l := startLoad(t, stores, kinds, 0.6)
	l.waitFor(t, moveLimit*int64(len(kinds))/5)
	atStart := l.admitted()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", id, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", id, "MIGRATING", dstID).Err())
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(id), 1).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		must(src.Migrate(ctx, host, port, keys[0], 0, 5*time.Second).Err())
		moved++
		time.Sleep(20 * time.Millisecond) // the load meets keys on both sides
	}
	for _, n := range []*redis.Client{dst, src, nodeClient(t, c.Addrs[2])} {
		must(n.Do(ctx, "CLUSTER", "SETSLOT", id, "NODE", dstID).Err())
	}
	during := l.admitted() - atStart
	l.open(t)

	t.Logf("moved %d keys of slot %d; %d admitted before the migration, %d during it", moved, id, atStart, during)
	if moved < len(kinds) {
		t.Errorf("migrated %d keys, want at least %d (the counters existed)", moved, len(kinds))
	}
	for _, k := range kinds {
		t.Logf("%s: admitted %d, denied %d, failed %d", k.name, k.admitted.Load(), k.denied.Load(), k.failed.Load())
		if got := k.admitted.Load(); got != moveLimit {
			t.Errorf("%s: admitted %d, want exactly %d", k.name, got, moveLimit)
		}
		if got := counter(t, stores[0], k.reqs[0]); got != moveLimit {
			t.Errorf("%s: counter %d after the reshard, want %d", k.name, got, moveLimit)
		}
	}
	if owner, err := dst.ClusterCountKeysInSlot(ctx, int(id)).Result(); err != nil || owner == 0 {
		t.Errorf("target holds %d keys of slot %d, %v: the counters did not move", owner, id, err)
	}
}

// TestClusterFailoverUnderLoad promotes master 0's replica with CLUSTER
// FAILOVER while load runs. A manual failover waits for the replica to
// catch up with its master, whose clients are paused meanwhile, before it
// takes the slots over; the old master then answers MOVED, and the store
// sends those calls again. So no acknowledged write is lost and every
// counter admits exactly its limit.
func TestClusterFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	c, stores, kinds := moveSetup(t)
	ctx := context.Background()
	l := startLoad(t, stores, kinds, 0.6)
	l.waitFor(t, moveLimit*int64(len(kinds))/5)
	if err := nodeClient(t, c.Replica(0).Addr).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitMaster(t, c.Replica(0).Addr)
	l.open(t)
	for _, k := range kinds {
		t.Logf("%s: admitted %d, denied %d, failed %d", k.name, k.admitted.Load(), k.denied.Load(), k.failed.Load())
		if got := k.admitted.Load(); got != moveLimit {
			t.Errorf("%s: admitted %d, want exactly %d", k.name, got, moveLimit)
		}
		if got := counter(t, stores[0], k.reqs[0]); got != moveLimit {
			t.Errorf("%s: counter %d after the failover, want %d", k.name, got, moveLimit)
		}
	}
}

// TestClusterMasterKilledUnderLoad kills master 0 while load runs, and its
// replica takes over after the cluster's node timeout. What a failover can
// and cannot guarantee: Redis replicates asynchronously, so a write the
// master acknowledged in its last moments may never have reached the
// replica; those hits are lost and admitted again. Calls in flight when it
// died fail (the store never resends them: they may have run). What holds:
// the new master starts from the replica's count R, and from there admits
// at most limit - R (no call counted twice), so a counter admits at most
// its limit plus the hits the old master admitted beyond R. On loopback the
// loss is usually nothing; the test checks the bound and logs the loss.
func TestClusterMasterKilledUnderLoad(t *testing.T) {
	t.Parallel()
	c, stores, kinds := moveSetup(t)
	ctx := context.Background()
	replica := redis.NewClient(&redis.Options{Addr: c.Replica(0).Addr, Protocol: 2,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	t.Cleanup(func() { _ = replica.Close() })
	l := startLoad(t, stores, kinds, 0.6)
	l.waitFor(t, moveLimit*int64(len(kinds))/5)
	c.Node(0).Stop()
	// What the replica holds now is what it will hold when promoted: its
	// master is gone. A short wait lets it read what the kernel delivered.
	time.Sleep(100 * time.Millisecond)
	r := make([]int64, len(kinds))
	for i, k := range kinds {
		key := string(window.AppendWindow([]byte(k.reqs[0].Key), window.At(storetest.T0, time.Minute)))
		v, err := replica.Get(ctx, key).Int64()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s on the replica: %v", key, err)
		}
		r[i] = v
	}
	waitMaster(t, c.Replica(0).Addr)
	l.open(t)
	for i, k := range kinds {
		old := k.admittedMark.Load() // every admission until the promotion was the old master's
		lost := max(0, old-r[i])
		t.Logf("%s: admitted %d (%d by the old master, which had replicated %d), denied %d, failed %d; %d hits lost",
			k.name, k.admitted.Load(), old, r[i], k.denied.Load(), k.failed.Load(), lost)
		if got := k.admitted.Load(); got > moveLimit+lost {
			t.Errorf("%s: admitted %d, want at most %d (the limit) + %d (lost in the failover)", k.name, got, moveLimit, lost)
		}
		if got := counter(t, stores[0], k.reqs[0]); got != moveLimit {
			t.Errorf("%s: counter %d on the new master, want %d", k.name, got, moveLimit)
		}
	}
}

// waitMaster waits until the node at addr is a master.
func waitMaster(t *testing.T, addr string) {
	t.Helper()
	n := nodeClient(t, addr)
	err := pollUntil(moveBound, func() bool {
		role, err := n.Do(context.Background(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	if err != nil {
		t.Fatalf("%s did not become master: %v", addr, err)
	}
}
