// Package window holds the arithmetic of rate-limit windows, the encoding of
// counter keys, and the counter stores (in memory and Redis) that check and
// count hits atomically.
//
// Windows are aligned to the Unix epoch: a window of size S milliseconds
// starts at now - now mod S. Every replica that agrees on the time therefore
// agrees on the window without talking to the others. A store call is one
// atomic step over all counters of a request: either every non-shadow counter
// has room and all are incremented, or none is touched, so a denied request
// consumes no quota.
//
// The package knows nothing of gRPC or Envoy; package envoyrls maps Envoy's
// descriptors onto it.
package window
