// Package window holds the arithmetic of rate-limit windows, the encoding of
// counter keys, and the counter stores (in memory and Redis) that check and
// count hits so that a denied request consumes no quota.
//
// Windows are aligned to the Unix epoch: a window of size S milliseconds
// starts at now - now mod S. Every replica that agrees on the time (see
// Clock) therefore agrees on the window without talking to the others.
//
// A Take checks every counter of a request and counts them only if every
// non-shadow counter has room. In memory and on one Redis node (or behind
// Sentinel) that is one atomic step: one Lua script. On Redis Cluster,
// counters on different hash slots are checked per slot in parallel and the
// slots that counted are refunded when another denied, so a denied request
// still ends up consuming nothing (see Redis).
//
// Around a store: OverLimitCache denies locally for counters known full,
// Breaker fails fast while Redis is down, and NewBatchedRedis coalesces
// concurrent requests into one script call under the Redis store.
//
// The package knows nothing of gRPC or Envoy; package envoyrls maps Envoy's
// descriptors onto it.
package window
