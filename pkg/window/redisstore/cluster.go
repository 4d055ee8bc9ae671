package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// slotGroup is the requests of one Take that share a hash slot.
type slotGroup struct {
	slot  uint16
	take  []int // indexes of requests that count (or only check)
	give  []int // indexes of refund requests
	err   error // set when the group's node failed
	taken bool  // the take script ran and allowed: its hits are counted
}

// sameSlot returns the hash slot of the current windows' keys of reqs and
// whether they all share it, as a Take of one counter, or of counters with
// one hash tag, does.
func sameSlot(nowMs int64, reqs []window.Counter) (uint16, bool) {
	var a [128]byte
	var id uint16
	for i := range reqs {
		if s := windowSlot(a[:0], nowMs, &reqs[i]); i == 0 {
			id = s
		} else if s != id {
			return 0, false
		}
	}
	return id, true
}

// windowSlot returns the hash slot of r's key at nowMs (its current
// window's, or a TokenBucket's or SlidingLog's), built in buf.
func windowSlot(buf []byte, nowMs int64, r *window.Counter) uint16 {
	return slot(r.AppendStoreKey(buf, nowMs))
}

// oneNode reports whether a batched Store may send reqs, whose counters lie
// on several hash slots, as one request of a node's call: whether the
// cluster client's view puts all their slots on one node, and cross-slot
// calls are on. first is the slot of reqs[0]'s current window's key.
func (s *Store) oneNode(ctx context.Context, nowMs int64, reqs []window.Counter) (first uint16, ok bool) {
	if s.batch == nil || s.noCross.Load() {
		return 0, false
	}
	var a [128]byte
	var node *redis.Client
	for i := range reqs {
		r := &reqs[i]
		key := a[:0]
		key = r.AppendStoreKey(key, nowMs)
		id := slot(key)
		k := r.Key
		if slot(k) != id {
			k = string(key)
		}
		n, err := s.shards.MasterForKey(ctx, k)
		if err != nil || (i > 0 && n != node) {
			return 0, false
		}
		if i == 0 {
			first, node = id, n
		}
	}
	return first, true
}

// groupBySlot splits reqs by the hash slot of their current window's key,
// in order of first appearance.
func groupBySlot(nowMs int64, reqs []window.Counter) []*slotGroup {
	var groups []*slotGroup
	var a [128]byte
	for i := range reqs {
		r := &reqs[i]
		id := windowSlot(a[:0], nowMs, r)
		var g *slotGroup
		for _, h := range groups {
			if h.slot == id {
				g = h
				break
			}
		}
		if g == nil {
			g = &slotGroup{slot: id}
			groups = append(groups, g)
		}
		if r.Refund {
			g.give = append(g.give, i)
		} else {
			g.take = append(g.take, i)
		}
	}
	return groups
}

// takeSlots is Take over several hash slots: check and count per slot in
// parallel, give back what was counted if any slot denied, then apply the
// refunds.
func (s *Store) takeSlots(ctx context.Context, nowMs int64, reqs []window.Counter, res []window.Result, groups []*slotGroup) (bool, error) {
	allowed := true
	s.runGroups(ctx, nowMs, reqs, res, groups, func(g *slotGroup) []int { return g.take },
		func(g *slotGroup, ok bool) {
			g.taken = ok
			allowed = allowed && ok
		})
	if !allowed {
		// Undo the slots that counted: each counted request again as a
		// refund of its hits on its current window (floored at zero,
		// keeping the TTL), which gives back only what this call added;
		// on a bucket the time its hits took, on a log the entries they
		// added (window.Counter.LogEntries). Charges stay: every slot
		// counts them whatever the answer.
		undo := make([]window.Counter, len(reqs))
		for i := range reqs {
			undo[i] = reqs[i].Undo()
		}
		back := slices.Clone(res) // a request that took no hits needs no undo and keeps its count
		s.runGroups(ctx, nowMs, undo, back, groups, func(g *slotGroup) []int {
			if !g.taken {
				return nil
			}
			var idx []int
			for _, i := range g.take {
				if reqs[i].Hits > 0 && !reqs[i].Charge {
					idx = append(idx, i)
				}
			}
			return idx
		}, func(g *slotGroup, _ bool) {
			for _, i := range g.take {
				if !reqs[i].Charge { // the state as it was before this call
					res[i].Count, res[i].Empty = back[i].Count, back[i].Empty
				}
			}
		})
		return false, partial(groups, len(reqs))
	}
	s.runGroups(ctx, nowMs, reqs, res, groups, func(g *slotGroup) []int { return g.give }, nil)
	return true, partial(groups, len(reqs))
}

// runGroups runs the script for idx(g) of every group that has not failed
// yet, all at once, writes the Results and reports each answer to done.
// A group whose call fails gets its err set.
//
// Unbatched, each group is its own command, in parallel, rather than one
// ClusterClient pipeline: when a pipeline's retry for a failing node gives
// up, go-redis sets that error on every command of the pipeline, also on
// those other nodes answered, and a healthy slot would then look failed.
// Batched, each group joins the batch of its slot, which the worker
// pipelines to that slot's node with other Takes' requests (see
// sendSlots), one node's failure kept to that node's calls.
func (s *Store) runGroups(ctx context.Context, nowMs int64, reqs []window.Counter, res []window.Result, groups []*slotGroup,
	idx func(*slotGroup) []int, done func(g *slotGroup, allowed bool)) {
	type call struct {
		g    *slotGroup
		idx  []int
		vals []any
		err  error
	}
	var calls []*call
	for _, g := range groups {
		if g.err != nil {
			continue
		}
		if ix := idx(g); len(ix) > 0 {
			calls = append(calls, &call{g: g, idx: ix})
		}
	}
	if len(calls) == 0 {
		return
	}
	if s.batch != nil {
		dl, _ := ctx.Deadline() // take set it
		queued := make([]*pending, len(calls))
		for i, c := range calls {
			queued[i], c.err = s.batch.enqueue(ctx, dl, newTake(nowMs, reqs, c.idx), c.g.slot, false)
		}
		for i, c := range calls {
			if queued[i] != nil {
				c.vals, c.err = s.batch.wait(queued[i], nil, time.Time{})
			}
		}
	} else {
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Go(func() {
				v, err := s.script(ctx, callArgs(nowMs, reqs, c.idx))
				if err == nil {
					c.vals, err = replyValues(v)
				}
				c.err = err
			})
		}
		wg.Wait()
	}
	for _, c := range calls {
		sub := make([]window.Result, len(c.idx))
		ok, err := false, c.err
		if err == nil {
			ok, err = parseRequest(c.vals, &take{reqs: reqs, idx: c.idx}, sub)
		}
		if err != nil {
			if !errors.Is(err, window.ErrStore) {
				err = fmt.Errorf("%w: take %q: %w", window.ErrStore, reqs[c.idx[0]].Key, err)
			}
			c.g.err = err
			continue
		}
		for j, i := range c.idx {
			res[i] = sub[j]
		}
		if done != nil {
			done(c.g, ok)
		}
	}
}

// partial returns nil when no group failed, the first error when all of
// the n requests failed, and a *window.PartialError otherwise.
func partial(groups []*slotGroup, n int) error {
	var failed []int
	var first error
	for _, g := range groups {
		if g.err == nil {
			continue
		}
		if first == nil {
			first = g.err
		}
		failed = append(failed, g.take...)
		failed = append(failed, g.give...)
	}
	if first == nil {
		return nil
	}
	if len(failed) == n {
		return first
	}
	slices.Sort(failed)
	return &window.PartialError{Failed: failed, Err: first}
}
