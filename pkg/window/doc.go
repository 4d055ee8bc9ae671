// Package window holds the arithmetic of rate-limit windows, the encoding of
// counter keys, the Counter and Result of a counter, the Store interface and
// the stores that live in the process: Memory, and OverLimitCache and
// Breaker, which wrap another store. Package redisstore holds the store whose
// counters live in Redis.
//
// Windows are aligned to the Unix epoch: a window of size S milliseconds
// starts at now - now mod S (see At). Every replica that agrees on the time
// (see Clock) therefore agrees on the window without talking to the others.
// Functions take now as a parameter and read no clock of their own.
//
// A Store's Take checks every counter of a request and counts them only if
// every non-shadow counter has room, so a denied request consumes no quota;
// a charge (Counter.Charge), a cost already spent, is counted whatever the
// answer and may take its counter past the limit.
// Every store decides alike: the same room rule (hits, or one when a request
// only checks), the same sliding estimate (Counter.Weight) and the same
// counter lifetime (Counter.TTL). A store that cannot answer returns an
// error wrapping ErrStore; one spread over several nodes may answer some
// requests and not others, and says which with a *PartialError.
//
// Around a store: OverLimitCache denies locally for counters known full,
// and Breaker fails fast while the store is down.
//
// The package knows nothing of gRPC or Envoy; package envoyrls maps Envoy's
// descriptors onto it.
package window
