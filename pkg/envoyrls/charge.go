package envoyrls

import (
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// statesCost reports whether a descriptor's hits are a cost the request
// states, which a limit that charges counts even when it does not fit: a
// hits_addend of the descriptor (Envoy's route hits_addend, such as the
// tokens of a response at stream end, or 0 for a check), or one of the
// request above 1. A request that states none, or 1, is one hit, Envoy's
// default cost of a request, which is counted only when it fits.
func statesCost(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) bool {
	return d.HitsAddend != nil || req.HitsAddend > 1
}
