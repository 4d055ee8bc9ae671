// Package envoyrls serves Envoy's envoy.service.ratelimit.v3.RateLimitService:
// it matches each request descriptor against rules from package rules
// (envoyproxy/ratelimit's YAML format), and asks a counter store from package
// window to check and count the matched limits in one atomic step.
//
// Files: server.go answers ShouldRateLimit, response.go builds Envoy's
// response, errors.go maps errors to gRPC codes, codec.go is the gRPC codec
// (it decodes requests that are not valid UTF-8), wire.go encodes the hot
// path's request and response by hand, reload.go swaps rules at run time,
// metrics.go exports Prometheus metrics, and http.go serves the health,
// rules and metrics endpoints.
package envoyrls
