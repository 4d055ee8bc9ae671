// Package envoyrls serves Envoy's envoy.service.ratelimit.v3.RateLimitService:
// it matches each request descriptor against a compiled rule set from package
// rules, and asks a counter store from package window to check and count the
// matched limits in one atomic step.
//
// Files: server.go answers ShouldRateLimit, validate.go refuses malformed
// requests, key.go names each limit's counter, override.go applies Envoy's
// per-descriptor limit overrides, charge.go tells charges from admissions,
// metadata.go builds dynamic_metadata, observer.go is what metrics see,
// response.go builds Envoy's response, served.go keeps the rules being
// served with the response parts prepared for their limits (current_limit
// and the 429), errors.go maps errors to gRPC codes (the one place that does),
// codec.go is the gRPC codec (it decodes requests that are not valid UTF-8),
// wire.go decodes the usual request by hand, and trace.go makes the
// OpenTelemetry span of a request when the server is given a tracer; responses
// go through go-control-plane's generated encoder when built with -tags
// vtprotobuf.
//
// Words: a request is one ShouldRateLimit RPC, decided in its scratch; a
// call is one Take of the store (Observer.StoreCall is told of each); below
// it, in redisstore, a call is one run of the script.
package envoyrls
