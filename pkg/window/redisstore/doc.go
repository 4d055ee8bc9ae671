// Package redisstore is a window.Store whose counters live in Redis, so
// every replica of a service that uses the same Redis and key prefix shares
// them: a single node, a Sentinel-managed master, or Redis Cluster, through
// a go-redis client.
//
// # One script per decision
//
// Each Take is one EVALSHA of an embedded Lua script, take.lua, which checks
// every counter of a request and counts them only if every non-shadow
// counter has room; a denied request writes nothing but its charges
// (window.Counter.Charge), which count whatever the answer. The script is loaded
// by Ping and sent again as EVAL after NOSCRIPT (a restarted or flushed
// Redis), when nothing ran. Counter keys are the request's Key plus its
// window (window.AppendWindow); a counter expires its window plus one second
// after its first hit (window.Counter.TTL), and a sliding one a window later.
// A token bucket's key is the Key plus its window's size only
// (window.Counter.AppendStoreKey), a string holding its theoretical arrival
// time in ms ("1763800020123.456789", readable with GET) that expires a
// second after the bucket is full again; a sliding log's is a sorted set of
// one member per counted hit, scored by its time in ms, that expires its
// window plus one second after its last write. Neither goes in the short
// form below or is shared among a call's requests.
//
// The script takes the requests of a call one after another and decides
// each on its own. A request goes either in the full form (five values per
// counter: limit, hits, TTL, flags, weight) or, when it is the most common
// kind (plain fixed-window counters), in a short form that names a
// (limit, hits, TTL) triple listed once per call; take.lua's header states
// the protocol.
//
// Redis runs every replica's scripts on one thread, so a key that many
// requests of one call hit (a hot tenant's) costs one command per call,
// not one per request. The call lists such shared keys first (see
// shared.go) with the hits their counting requests plan. The script reads
// each with one INCRBY of those hits (a GET when none counts), betting
// that they are all admitted, decides every request in order on the key's
// running count in Lua, and then writes the key at most once more: the
// hits of the denied requests given back, the TTL of a key a counter took
// from 0 (SET with PX, or PEXPIRE), or the DEL of a new key no request
// took. A key that one counter of the call uses is counted first and
// undone on denial, one INCRBY (and a DECRBY on denial). Either way the
// decisions and Results are those of separate calls.
//
// # Batching
//
// NewBatched coalesces concurrent Takes into one script call, which costs
// Redis one invocation and one round trip for the whole batch, while the
// script still decides each request alone. A lone request is sent at once.
// On Redis Cluster a batch is one script call per node, all nodes at once:
// a batch costs each node it reaches one round trip and one script run.
// Redis 7.0 or later is needed for that; on older servers a batch is one
// script call per hash slot, the calls of one node in one pipeline.
//
// # Redis Cluster
//
// A call's declared keys must lie in one hash slot. Counter keys carry a
// hash tag per descriptor (see window.AppendKeyHead), so a request whose
// counters share a slot (always the case with one descriptor) is one
// EVALSHA. A batched call over several slots of one node runs take.lua
// behind cross.lua, a head flagged allow-cross-slot-keys that takes its
// keys in ARGV and checks that the node serves every one of them before
// anything is written (pipeline.go); a batched request over several slots
// of one node is then decided in that one call. A request over slots of
// several nodes (and any that a cross-slot call could not run) runs one
// script per slot, all in parallel (batched, each slot's part joins the
// batch, with other requests of its node).
// If any slot denies, the slots that allowed, and so counted, are given
// their hits back in a second parallel step, charges excepted: a denied
// request still consumes no quota but its charges once Take returns. In
// between, other requests can see those hits and be denied, so under
// concurrency a multi-slot counter may admit fewer than its limit (never
// more); a counter whose request's other counters never deny admits exactly
// its limit. Refunds
// (window.Counter.Refund) of a multi-slot request are applied after every
// slot has allowed, in one more parallel step. Every window.Counter.Key must
// hold a hash tag (window.AppendKeyHead's keys do); an untagged
// sliding-window key fails with CROSSSLOT. When some slots fail (a node
// down) and others answer, Take returns a *window.PartialError naming the
// failed requests.
//
// Script calls are never resent after a timeout or a lost connection, when
// the script may have run. A call is sent again only after an answer that
// says it did not run: MOVED or ASK (a reshard or a failover moved the slot;
// the cluster client follows and learns the new layout), TRYAGAIN (a slot
// half migrated holds some of the call's keys on each side), CLUSTERDOWN,
// READONLY, LOADING, NOSCRIPT, or a connection that could not be made, until
// the Take's deadline. So a reshard neither loses nor double-counts a hit. A
// failover by CLUSTER FAILOVER, which waits for the replica to catch up,
// loses none either; a master that dies takes with it the writes it
// acknowledged but had not yet replicated (Redis replicates asynchronously),
// and those hits are admitted again: under a failover a counter admits at
// most its limit plus the hits lost in it.
//
// # Tracing
//
// Given Options.Tracer, each Take is an OpenTelemetry span under its
// caller's; a batched script call, which serves many traces, has no span of
// its own, and each Take's span carries its batch's size, queueing time and
// round trip instead (see trace.go).
//
// # Clock
//
// Clock is the time the replicas agree on, the Redis server's, measured
// through the same client as the counters: on one node or behind Sentinel
// the master's TIME, on a cluster that of the master of one fixed slot. It
// lives here, not in pkg/window, so that the window arithmetic imports no
// Redis client and no logger.
//
// # Client settings
//
// The store bounds every Take by its Options.Timeout and marks script calls
// as never to be retried, since a retried script could count twice. The
// client should have ContextTimeoutEnabled, so that the deadline bounds the
// call, and MaxRetries -1.
package redisstore
