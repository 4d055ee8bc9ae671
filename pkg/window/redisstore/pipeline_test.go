package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// crossCluster starts a 3-master cluster and a batched store over it with
// its scripts loaded, and returns them with three tags on each master, each
// on a slot of its own.
func crossCluster(t *testing.T) (*redistest.Cluster, *Store, [][]string) {
	t.Helper()
	c := redistest.StartCluster(t, 3)
	tags := tagsByNode(t, clusterClient(t, c), c, 3)
	s := clusterReplica(t, c, true)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, s, tags
}

// handBatch returns one pending per request set in calls, at now, as
// Store.take would queue them: on the slot of its first counter, multi when
// its counters lie on several slots.
func handBatch(now time.Time, calls [][]window.Counter) []*pending {
	var batch []*pending
	for _, reqs := range calls {
		id, one := sameSlot(now.UnixMilli(), reqs)
		if !one {
			id = windowSlot(nil, now.UnixMilli(), &reqs[0])
		}
		batch = append(batch, &pending{ctx: context.Background(), deadline: time.Now().Add(5 * time.Second),
			take: newTake(now.UnixMilli(), reqs, nil), slot: id, multi: !one, done: make(chan struct{}, 1)})
	}
	return batch
}

// TestClusterBatchOneCallPerNode sends one hand-built batch whose requests
// lie on three slots of one node and on another node: each node gets one
// script call, and the requests are decided one by one as on a single
// node; a request over two slots of the node is decided at once, denied as
// a whole with nothing counted.
func TestClusterBatchOneCallPerNode(t *testing.T) {
	t.Parallel()
	c, s, tags := crossCluster(t)
	ctx := context.Background()
	a, b, d := storetest.Req(tags[0][0], 1, 1), storetest.Req(tags[0][1], 5, 1), storetest.Req(tags[0][2], 5, 1)
	other := storetest.Req(tags[1][0], 5, 1)
	calls := [][]window.Counter{
		{a},    // allowed
		{b},    // allowed
		{a},    // denied
		{d, a}, // two slots of node 0: denied as a whole, d not counted
		{d, b}, // allowed: d 1, b 2
		{other},
	}
	wantOK := []bool{true, true, false, false, true, true}
	batch := handBatch(storetest.T0, calls)
	before := make([]map[string]int64, 2)
	for i := range before {
		var err error
		if before[i], err = c.Node(i).CommandStats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	trips := s.RoundTrips()
	s.batch.send(batch, &sendBuf{})
	for _, bc := range batch {
		<-bc.done
	}
	if got := s.RoundTrips() - trips; got != 2 {
		t.Errorf("batch over two nodes: %d round trips, want 2", got)
	}
	for i := range before {
		after, err := c.Node(i).CommandStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := after["evalsha"] - before[i]["evalsha"]; got != 1 {
			t.Errorf("node %d ran EVALSHA %d times for the batch, want 1", i, got)
		}
	}
	for i, bc := range batch {
		if bc.err != nil {
			t.Fatalf("call %d: %v", i, bc.err)
		}
		res := make([]window.Result, len(calls[i]))
		ok, err := parseRequest(bc.vals, &bc.take, res)
		if err != nil || ok != wantOK[i] {
			t.Errorf("call %d = %v, %v, want %v", i, ok, err, wantOK[i])
		}
	}
	for _, want := range []struct {
		r    window.Counter
		want uint64
	}{{a, 1}, {b, 2}, {d, 1}, {other, 1}} {
		if got := counter(t, s, want.r); got != want.want {
			t.Errorf("counter %s = %d, want %d", want.r.Key, got, want.want)
		}
	}
}

// TestClusterBatchSlotMoved moves an empty slot of node 0 to node 1 behind
// the store's back. The cross-slot script sent to node 0 for it answers
// NOTLOCAL, naming the key, before it writes anything; a batch whose call
// met that sends its requests again per slot, where the moved slot's is
// redirected (MOVED) to its new node, and a Take over the moved slot and
// another of node 0 goes per slot: every hit counted exactly once.
func TestClusterBatchSlotMoved(t *testing.T) {
	t.Parallel()
	c, s, tags := crossCluster(t)
	ctx := context.Background()
	stay, moved := storetest.Req(tags[0][0], 5, 1), storetest.Req(tags[0][1], 5, 1)
	id := slot(moved.Key)
	dstID, err := nodeClient(t, c.Addrs[1]).ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range c.Addrs {
		if err := nodeClient(t, addr).Do(ctx, "CLUSTER", "SETSLOT", id, "NODE", dstID).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var cb callBuf
	nowMs := storetest.T0.UnixMilli()
	args := crossArgs(nil, cb.build([]take{newTake(nowMs, []window.Counter{stay, moved}, nil)}))
	err = nodeClient(t, c.Addrs[0]).Process(ctx, crossCmd(ctx, false, args))
	if !isNotLocal(err) || !strings.Contains(err.Error(), moved.Key) {
		t.Errorf("cross-slot call on a moved slot: %v, want NOTLOCAL naming %s", err, moved.Key)
	}

	calls := [][]window.Counter{{stay}, {moved}, {stay, moved}}
	batch := handBatch(storetest.T0, calls)
	s.batch.send(batch, &sendBuf{})
	for _, bc := range batch {
		<-bc.done
	}
	for i, bc := range batch[:2] {
		res := make([]window.Result, 1)
		if bc.err != nil {
			t.Fatalf("call %d after the move: %v", i, bc.err)
		}
		if ok, err := parseRequest(bc.vals, &bc.take, res); !ok || err != nil {
			t.Errorf("call %d after the move = %v, %v, want allowed", i, ok, err)
		}
	}
	if err := batch[2].err; !errors.Is(err, errRegroup) {
		t.Errorf("two-slot call after the move: %v, want errRegroup", err)
	}
	if ok, _ := storetest.Take(t, s, storetest.T0, stay, moved); !ok {
		t.Errorf("Take over the moved slot denied, want allowed")
	}
	if got := counter(t, s, stay); got != 2 {
		t.Errorf("counter on node 0 = %d, want 2", got)
	}
	if got := counter(t, s, moved); got != 2 {
		t.Errorf("counter on the moved slot = %d, want 2", got)
	}
}
