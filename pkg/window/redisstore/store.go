package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// scripter is the part of a go-redis client that a Store uses. A
// redis.UniversalClient (*redis.Client, a Sentinel failover client or a
// *redis.ClusterClient) has it.
type scripter interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

// sharded is the part of a *redis.ClusterClient that tells a Store its
// counters are spread over nodes: it reaches each node (Ping), names the
// master of a slot from the client's view of the cluster (a batch's
// per-node pipelines) and refreshes that view after a node failed.
type sharded interface {
	ForEachShard(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

// Store is a window.Store whose counters live in Redis and are shared by
// every replica that uses the same server and key prefix. On a single node
// or behind Sentinel each Take is one EVALSHA of the embedded script; on
// Redis Cluster a request whose counters lie on several hash slots of one
// node is one call too, and one over several nodes is one script per slot,
// in parallel, with refunds when a slot denies (see the package doc). A batched Store (NewBatched) shares its script calls among
// concurrent Takes, on a cluster one per node (see the package doc).
//
// Every Take is bounded by how long its caller will wait: the time left to
// ctx's deadline less a margin (a tenth, at least 5 ms; see answerMargin)
// for the caller to answer, with a failure mode, before it gives up;
// Options.Timeout when ctx has no deadline; and never more than
// Options.MaxTimeout when that is set. So a caller need not wrap its
// context in a timeout of its own, and a Redis a few milliseconds away
// still decides the calls of a caller that waits a second. A batched Take
// (see NewBatched) waits for its batch to leave (while another call is out,
// until that comes back or for at most about BatchOptions.Spacing) and then
// for its own call; a batch call is bounded by the earliest deadline of the Takes in it, and
// a Take whose deadline passes while it is still queued stops waiting and
// is not sent. So against a stalled Redis every Take ends by its own bound,
// whatever the deadlines of the others.
//
// Script calls are never retried by go-redis (a retried script could count
// twice). The store sends a call again only after an answer that means
// nothing ran: NOSCRIPT, and on a cluster a redirection, TRYAGAIN,
// CLUSTERDOWN or a connection that could not be made (see redo). The client should also have ContextTimeoutEnabled on, so that
// the deadline bounds the call, and MaxRetries -1. A Store is safe for
// concurrent use; it does not own the client and does not close it.
type Store struct {
	client     scripter
	shards     sharded       // nil unless the client is a cluster client
	timeout    time.Duration // without a deadline (Options.Timeout)
	maxTimeout time.Duration // cap; 0: none (Options.MaxTimeout)
	roundTrips atomic.Uint64
	noCross    atomic.Bool  // a node refused crossSource: no cross-slot calls (see pipeline.go)
	batch      *batcher     // nil unless made by NewBatched
	tracer     trace.Tracer // nil: no spans
	wait       int          // replicas to WAIT for after each script call; 0: none
	pipe       pipeliner    // the client, to send a script call and its WAIT at once; nil: one after the other
	promotable ReplicaCount // nil: none
}

// pipeliner is the part of a go-redis client that sends a script call and
// its WAIT in one round trip.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// Options configure a Store. Zero fields take their defaults.
type Options struct {
	// Timeout bounds a Take whose ctx has no deadline; default 1s. A Take
	// whose ctx has a deadline gets the time left to it less a margin for
	// answering (a tenth, at least 5 ms) instead, longer or shorter than
	// Timeout: a caller such as Envoy sends how long it waits (its filter
	// timeout), and a failure mode applied well before it gives up would
	// turn a slow Redis into no rate limiting at all.
	Timeout time.Duration
	// MaxTimeout, when positive, caps every Take, deadline or not: for a
	// service that would rather apply its failure modes fast than wait for
	// a slow Redis as long as its callers allow. Zero (the default) sets no
	// cap.
	MaxTimeout time.Duration
	// WaitReplicas, when positive, sends a WAIT for that many replicas in
	// the same round trip as every script call, and a call whose writes
	// fewer replicas acknowledged within its deadline fails with an error
	// wrapping ErrUnconfirmed (and window.ErrStore): the caller applies its
	// failure mode instead of admitting on a count the next failover may
	// drop. Behind Sentinel this is what keeps a failover from losing
	// charges: the old master keeps taking writes between the replica's
	// promotion and its own demotion, and drops them; its promoted replica
	// no longer acknowledges them, so they are never reported counted. The
	// price: Redis waits for the replica's acknowledgement (a round trip
	// from master to replica) before it answers, and with no replica up
	// every call fails unless Promotable says no failover could drop it.
	// Ignored on a cluster. Zero (the default) sends no WAIT.
	WaitReplicas int
	// Promotable, with WaitReplicas, tells how many replicas a failover
	// could promote now (a *Promotable). A call whose writes fewer replicas
	// acknowledged than WaitReplicas counts as confirmed when as many
	// acknowledged as that recent count, and while the count is 0 calls
	// send no WAIT, which would only wait out its timeout: so a master left
	// without a replica it could fail over to (its replica died, or it is
	// the replica promoted when its master died) keeps counting. Nil, or no
	// recent count: the call is unconfirmed.
	Promotable ReplicaCount
	// Tracer makes a span of each Take (see trace.go), the child of any
	// span its ctx carries. Nil (the default) makes none and costs nothing.
	Tracer trace.Tracer
}

// New returns an unbatched Store over client: a redis.UniversalClient
// (*redis.Client, a Sentinel failover client, *redis.ClusterClient), or
// anything with the same methods. A client with the methods of a
// *redis.ClusterClient that name its nodes (ForEachShard, MasterForKey,
// ReloadState) is treated as a cluster: counters are grouped by hash slot.
func New(client scripter, o Options) *Store {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	s := &Store{client: client, timeout: o.Timeout, maxTimeout: max(o.MaxTimeout, 0), tracer: o.Tracer}
	s.shards, _ = client.(sharded)
	if o.WaitReplicas > 0 && s.shards == nil {
		s.wait, s.promotable = o.WaitReplicas, o.Promotable
		s.pipe, _ = client.(pipeliner)
	}
	return s
}

// takeDeadline is when a Take that starts at start under ctx must end: at
// ctx's deadline less answerMargin, which leaves the caller time to answer
// (with a failure mode) before it gives up; timeout after start when ctx
// has none; and not later than maxTimeout after start when maxTimeout is
// positive.
func takeDeadline(ctx context.Context, start time.Time, timeout, maxTimeout time.Duration) time.Time {
	dl := start.Add(timeout)
	if cdl, ok := ctx.Deadline(); ok {
		dl = cdl.Add(-answerMargin(cdl.Sub(start)))
	}
	if maxTimeout > 0 && dl.Sub(start) > maxTimeout {
		dl = start.Add(maxTimeout)
	}
	return dl
}

// Budget returns how long a Take under ctx that starts at start may wait
// for Redis (see Store): for a circuit breaker to tell a call that had
// little time from a Redis that does not answer (window.BreakerOptions).
func (s *Store) Budget(ctx context.Context, start time.Time) time.Duration {
	return takeDeadline(ctx, start, s.timeout, s.maxTimeout).Sub(start)
}

// answerMargin is how much of left, the time to a caller's deadline, a Take
// leaves the caller: a tenth, but at least 5 ms (a quarter of a deadline
// shorter than 20 ms). The margin pays for answering and for the answer's
// way back, and on a busy machine for a few milliseconds of scheduling
// delay, which a tenth of Envoy's default 20 ms would not cover. So 20 ms
// gives the store 15 ms, 1 s gives it 900 ms. A deadline already passed
// keeps nothing.
func answerMargin(left time.Duration) time.Duration {
	return max(left/10, min(left/4, 5*time.Millisecond))
}

// Ping checks that Redis answers, and loads the script so the first request
// does not pay for it. On a cluster it pings and loads the script on every
// node it knows, and fails only if none answers: a cluster with one node
// down still serves the other nodes' slots.
func (s *Store) Ping(ctx context.Context) error {
	if s.shards != nil {
		var ok atomic.Int64
		err := s.shards.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := c.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("ping %s: %w", c.Options().Addr, err)
			}
			if err := c.ScriptLoad(ctx, takeSource).Err(); err != nil {
				return fmt.Errorf("script load %s: %w", c.Options().Addr, err)
			}
			if err := c.ScriptLoad(ctx, crossSource).Err(); isRefused(err) {
				s.noCross.Store(true) // the per-slot calls still work
			} else if err != nil {
				return fmt.Errorf("script load %s: %w", c.Options().Addr, err)
			}
			ok.Add(1)
			return nil
		})
		if err != nil && ok.Load() == 0 {
			return fmt.Errorf("%w: %w", window.ErrStore, err)
		}
		return nil
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: ping: %w", window.ErrStore, err)
	}
	if err := s.client.ScriptLoad(ctx, takeSource).Err(); err != nil {
		return fmt.Errorf("%w: script load: %w", window.ErrStore, err)
	}
	return nil
}

// RoundTrips returns how many round trips this store has made to Redis, for
// measuring round trips per decision: each script call sent alone, and each
// pipeline of a batch's script calls to one cluster node, counts one. A
// step that reaches three cluster nodes in parallel counts three.
func (s *Store) RoundTrips() uint64 { return s.roundTrips.Load() }

// Take checks every request against its counter at now and, only if every
// non-shadow request has room, counts them all; when one has none, it
// counts only the charges (window.Counter.Charge). It writes one window.Result
// per request into res (len(res) >= len(reqs)) and reports whether the
// requests were allowed. now should be the time the replicas agree on (see
// Clock); Redis's own clock only runs the TTLs. Errors wrap
// window.ErrStore; on a cluster they may be a *window.PartialError.
func (s *Store) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	if len(reqs) == 0 {
		return true, nil
	}
	if s.tracer != nil {
		return s.tracedTake(ctx, now, reqs, res)
	}
	return s.take(ctx, now, reqs, res, nil)
}

// take is Take without its span; it fills info, when not nil, for the span.
func (s *Store) take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result, info *takeTrace) (bool, error) {
	nowMs := now.UnixMilli()
	res = res[:len(reqs)]
	dl := takeDeadline(ctx, time.Now(), s.timeout, s.maxTimeout)
	var id uint16 // the one hash slot of reqs, on a cluster
	if s.shards != nil {
		var one bool
		if id, one = sameSlot(nowMs, reqs); !one {
			if first, ok := s.oneNode(ctx, nowMs, reqs); ok {
				allowed, err := s.batch.take(ctx, dl, nowMs, reqs, res, info, first, true)
				if !errors.Is(err, errRegroup) {
					return allowed, err
				}
			}
			ctx, cancel := context.WithDeadline(ctx, dl)
			defer cancel()
			groups := groupBySlot(nowMs, reqs)
			if info != nil {
				info.slots = len(groups)
			}
			return s.takeSlots(ctx, nowMs, reqs, res, groups)
		}
	}
	if s.batch != nil {
		// No context per Take here: the batch's call gets one.
		return s.batch.take(ctx, dl, nowMs, reqs, res, info, id, false)
	}
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	r := newTake(nowMs, reqs, nil)
	return s.run(ctx, callArgs(nowMs, reqs, nil), &r, res)
}

// run sends the call args of the one request r and reads its reply into res.
func (s *Store) run(ctx context.Context, args []any, r *take, res []window.Result) (bool, error) {
	v, err := s.script(ctx, args)
	if err != nil {
		return false, fmt.Errorf("%w: take %q: %w", window.ErrStore, args[3], err)
	}
	return parseTake(v, r, res)
}
