package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// On a cluster a batch is one script call per node. Redis refuses a call
// whose declared keys span hash slots (CROSSSLOT), so a node's call on
// several slots is a call of crossSource (see cross.lua), which declares
// none and checks that the node serves every key before it writes; a call
// on one slot stays a plain call of take.lua, which Redis checks itself.
// Every node's call goes at once, on that node's own client rather than
// through the ClusterClient, so that a failing node fails only its own
// call and the store alone decides what is sent again: only what did not
// run (see redo). When a node refuses crossSource (Redis before 7.0 has no
// script flags), the store stops making such calls (Store.noCross): a
// batch is then one call per slot, the calls of one node in one pipeline.

// errRegroup is the answer to a Take on several slots of one node (see
// Store.take) that was not sent as one call, or whose call did not run:
// its node no longer serves all its slots, or the node refuses crossSource.
// The Take then goes per slot (see takeSlots).
var errRegroup = errors.New("redisstore: counters not on one node")

// clusterCall is one script call of a batch on a cluster: the batch's
// requests on one node (on one slot without cross-slot calls), in the
// order they came.
type clusterCall struct {
	node  *redis.Client // nil when err came before sending
	calls []*pending
	slot  uint16 // the first request's
	cross bool   // the requests span slots: a call of crossSource
	call  callBuf
	args  []any // built in call; for a cross call, rewritten into xargs
	xargs []any
	cmd   noRetryCmd
	v     any
	err   error
}

// clusterCalls is a worker's memory for the cluster calls of its batches.
type clusterCalls struct {
	list   []*clusterCall // the current batch's are list[:n]
	n      int
	byKey  map[any]*clusterCall // by node, or by slot without cross-slot calls
	nodes  map[uint16]*redis.Client
	byNode map[*redis.Client][]*clusterCall
}

// next returns a cleared call from sc's list.
func (sc *clusterCalls) next() *clusterCall {
	if sc.n == len(sc.list) {
		sc.list = append(sc.list, &clusterCall{})
	}
	g := sc.list[sc.n]
	sc.n++
	return g
}

// group sorts calls into cluster calls, in order of each one's first
// request, and builds each one's script call: by node, or by slot when
// cross is false. A request whose node cannot be named, or a request on
// several slots that cannot go as one call, gets a call of its own with
// err set, which is never sent.
func (sc *clusterCalls) group(ctx context.Context, s *Store, calls []*pending, buf *sendBuf, cross bool) []*clusterCall {
	if sc.byKey == nil {
		sc.byKey = make(map[any]*clusterCall)
		sc.nodes = make(map[uint16]*redis.Client)
		sc.byNode = make(map[*redis.Client][]*clusterCall)
	}
	sc.n = 0
	for _, c := range calls {
		if c.multi && !cross {
			g := sc.next()
			g.calls, g.slot, g.err = append(g.calls, c), c.slot, errRegroup
			continue
		}
		node, ok := sc.nodes[c.slot]
		if !ok {
			var err error
			if node, err = s.shards.MasterForKey(ctx, callKey(c)); err != nil {
				if c.multi {
					err = errRegroup
				}
				g := sc.next()
				g.calls, g.slot, g.err = append(g.calls, c), c.slot, err
				continue
			}
			sc.nodes[c.slot] = node
		}
		var key any = c.slot
		if cross {
			key = node
		}
		g := sc.byKey[key]
		if g == nil {
			g = sc.next()
			g.node, g.slot = node, c.slot
			sc.byKey[key] = g
		}
		g.cross = g.cross || c.multi || c.slot != g.slot
		g.calls = append(g.calls, c)
	}
	clear(sc.byKey)
	clear(sc.nodes)
	list := sc.list[:sc.n]
	for _, g := range list {
		if g.err != nil {
			continue
		}
		g.args = g.call.build(buf.requests(g.calls))
		clear(buf.parts)
		if g.cross {
			g.xargs = crossArgs(g.xargs, g.args)
		}
	}
	return list
}

// callKey returns a key of c's slot for the cluster client to find its
// node: its first counter's key, whose hash tag names the slot, or, for a
// key without one, that counter's current window's key.
func callKey(c *pending) string {
	r := c.at(0)
	if k := r.Key; slot(k) == c.slot {
		return k
	}
	return string(r.AppendStoreKey(nil, c.nowMs))
}

// sendSlots runs the script calls of live, a batch on a cluster sent at
// sent (for tracing), and hands each request its part of its call's reply:
// every node's call (or pipeline of per-slot calls) at once. Each node
// reached counts one round trip. A call whose answer says it did not run
// (a slot that moved, a node that lost the script or cannot be reached;
// see redo) is sent again per slot by goroutines of their own (see
// redoSlot and redoCross), so that neither the other nodes' requests nor
// the next batch wait for it.
func (b *batcher) sendSlots(ctx context.Context, live []*pending, buf *sendBuf, sent time.Time) {
	s := b.s
	calls := buf.slots.group(ctx, s, live, buf, !s.noCross.Load())
	byNode := buf.slots.byNode
	for _, g := range calls {
		if g.err == nil {
			byNode[g.node] = append(byNode[g.node], g)
		}
	}
	var wg sync.WaitGroup
	n := 0
	for node, gs := range byNode {
		n++
		if n == len(byNode) {
			pipeline(ctx, node, gs) // the last one, or the only one, here
		} else {
			wg.Go(func() { pipeline(ctx, node, gs) })
		}
	}
	wg.Wait()
	s.roundTrips.Add(uint64(n))
	clear(byNode)
	for _, g := range calls {
		switch {
		case g.err == nil || !isNoScript(g.err) && !notRun(g.err):
			deliver(g.calls, g.v, g.err)
			b.finish(g.calls, len(live), sent)
		case g.cross:
			b.redoCross(g, len(live), sent)
		default:
			b.redoSlot(slices.Clone(g.calls), g.err, len(live), sent)
		}
		g.call.release()
		clear(g.calls)
		clear(g.xargs)
		g.calls, g.args, g.xargs, g.v, g.err = g.calls[:0], nil, g.xargs[:0], nil, nil
		g.node, g.cross = nil, false
	}
}

// redoCross sends the requests of g, a cross-slot call that did not run,
// again per slot (see redoSlot), where the cluster client follows the
// redirections that name each slot's node; a request on several slots
// gets errRegroup (see Store.take). After NOSCRIPT it also loads
// crossSource on g's node for the next batches, or, if the node refuses
// it, stops cross-slot calls.
func (b *batcher) redoCross(g *clusterCall, size int, sent time.Time) {
	if isNoScript(g.err) {
		node, s := g.node, b.s
		b.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			if err := node.ScriptLoad(ctx, crossSource).Err(); isRefused(err) {
				s.noCross.Store(true)
			}
		})
	}
	var slots [][]*pending // in order of each slot's first request
	for _, c := range g.calls {
		if c.multi {
			deliver([]*pending{c}, nil, errRegroup)
			b.finish([]*pending{c}, size, sent)
			continue
		}
		i := slices.IndexFunc(slots, func(cs []*pending) bool { return cs[0].slot == c.slot })
		if i < 0 {
			slots = append(slots, nil)
			i = len(slots) - 1
		}
		slots[i] = append(slots[i], c)
	}
	for _, cs := range slots {
		b.redoSlot(cs, g.err, size, sent)
	}
}

// redoSlot sends the script call of calls, one slot's requests, again after
// err (see redo), in a goroutine of the batcher's that ends by the calls'
// earliest deadline, and hands them their answers.
func (b *batcher) redoSlot(calls []*pending, err error, size int, sent time.Time) {
	deadline := calls[0].deadline
	parts := make([]take, len(calls))
	for i, c := range calls {
		parts[i] = c.take
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	var call callBuf // memory of its own: the worker's goes to the next batch
	args := call.build(parts)
	b.wg.Go(func() { // b.wg counts this worker, so Close waits for it too
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		v, trips, err := b.s.redo(ctx, args, err)
		b.s.roundTrips.Add(uint64(trips))
		deliver(calls, v, err)
		b.finish(calls, size, sent)
	})
}

// pipeline sends the script calls gs to node, in one round trip, and
// records each one's answer.
func pipeline(ctx context.Context, node *redis.Client, gs []*clusterCall) {
	if len(gs) == 1 {
		g := gs[0]
		cmd := g.command(ctx)
		g.err = node.Process(ctx, cmd)
		g.v = cmd.Val()
		return
	}
	pipe := node.Pipeline()
	for _, g := range gs {
		g.cmd = g.command(ctx)
		_ = pipe.Process(ctx, g.cmd)
	}
	_, _ = pipe.Exec(ctx) // each command holds its own answer
	for _, g := range gs {
		g.v, g.err, g.cmd = g.cmd.Val(), g.cmd.Err(), noRetryCmd{}
	}
}

// command returns g's script call as EVALSHA.
func (g *clusterCall) command(ctx context.Context) noRetryCmd {
	if g.cross {
		return crossCmd(ctx, false, g.xargs)
	}
	return scriptCmd(ctx, false, g.args)
}
