package redisstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// On a cluster a batch is one script call per hash slot (a script may touch
// one slot only), and the calls whose slots one node serves go to it in one
// pipeline, every node's in parallel. Each node's pipeline is its own
// client's, rather than one ClusterClient pipeline, so that a failing node
// fails only its own calls (see runGroups) and the store alone decides what
// is sent again: only what did not run (see redo).

// slotCall is one script call of a batch on a cluster: the batch's requests
// on one hash slot, in the order they came.
type slotCall struct {
	calls []*batchCall
	call  callBuf // the call's memory, kept from batch to batch
	args  []any   // built in call
	cmd   noRetryCmd
	v     any
	err   error
}

// slotCalls is a worker's memory for the slot calls of its batches.
type slotCalls struct {
	list   []*slotCall // the current batch's are list[:n]
	n      int
	bySlot map[uint16]*slotCall
	byNode map[*redis.Client][]*slotCall
}

// group sorts calls into slot calls, in order of each slot's first call,
// and builds each one's script call.
func (sc *slotCalls) group(calls []*batchCall, buf *sendBuf) []*slotCall {
	if sc.bySlot == nil {
		sc.bySlot = make(map[uint16]*slotCall)
		sc.byNode = make(map[*redis.Client][]*slotCall)
	}
	sc.n = 0
	for _, c := range calls {
		g := sc.bySlot[c.slot]
		if g == nil {
			if sc.n == len(sc.list) {
				sc.list = append(sc.list, &slotCall{})
			}
			g = sc.list[sc.n]
			sc.n++
			sc.bySlot[c.slot] = g
		}
		g.calls = append(g.calls, c)
	}
	clear(sc.bySlot)
	slots := sc.list[:sc.n]
	for _, g := range slots {
		g.args = g.call.build(buf.requests(g.calls))
		clear(buf.parts)
	}
	return slots
}

// sendSlots runs the script calls of live, a batch on a cluster sent at
// sent (for tracing), and hands each request its part of its slot's reply:
// every node's calls in one pipeline, all nodes at once. Each node reached
// counts one round trip. A call whose answer says it did not run (a slot
// that moved, a node that lost the script or cannot be reached; see redo)
// is sent again by a goroutine of its own, until its requests' earliest
// deadline, so that neither the other slots' requests nor the next batch
// wait for it.
func (b *batcher) sendSlots(ctx context.Context, live []*batchCall, buf *sendBuf, sent time.Time) {
	s := b.s
	slots := buf.slots.group(live, buf)
	byNode := buf.slots.byNode
	for _, g := range slots {
		node, err := s.shards.MasterForKey(ctx, slotKey(g))
		if err != nil {
			g.err = err
			continue
		}
		byNode[node] = append(byNode[node], g)
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
	for _, g := range slots {
		if g.err != nil && (isNoScript(g.err) || notRun(g.err)) {
			b.redoSlot(slices.Clone(g.calls), g.err, len(live), sent)
		} else {
			deliver(g.calls, g.v, g.err)
			b.finish(g.calls, len(live), sent)
		}
		g.call.release()
		clear(g.calls)
		g.calls, g.args, g.v, g.err = g.calls[:0], nil, nil, nil
	}
}

// redoSlot sends the script call of calls, one slot's requests, again after
// err (see redo), in a goroutine of the batcher's that ends by the calls'
// earliest deadline, and hands them their answers.
func (b *batcher) redoSlot(calls []*batchCall, err error, size int, sent time.Time) {
	deadline := calls[0].deadline
	parts := make([]request, len(calls))
	for i, c := range calls {
		parts[i] = c.request
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

// slotKey returns a key of g's slot for the cluster client to find its
// node: the first counter's key, whose hash tag names the slot, or, for a
// key without one, its current window's key as the call carries it.
func slotKey(g *slotCall) string {
	c := g.calls[0]
	if k := c.at(0).Key; slot(k) == c.slot {
		return k
	}
	return string(keyOf(g.args[3])) // args: EVALSHA, hash, key count, keys
}

// pipeline sends the script calls gs to node, in one round trip, and
// records each one's answer.
func pipeline(ctx context.Context, node *redis.Client, gs []*slotCall) {
	if len(gs) == 1 {
		g := gs[0]
		cmd := scriptCmd(ctx, false, g.args)
		g.err = node.Process(ctx, cmd)
		g.v = cmd.Val()
		return
	}
	pipe := node.Pipeline()
	for _, g := range gs {
		g.cmd = scriptCmd(ctx, false, g.args)
		_ = pipe.Process(ctx, g.cmd)
	}
	_, _ = pipe.Exec(ctx) // each command holds its own answer
	for _, g := range gs {
		g.v, g.err, g.cmd = g.cmd.Val(), g.cmd.Err(), noRetryCmd{}
	}
}
