// Package envoyrls serves Envoy's envoy.service.ratelimit.v3.RateLimitService:
// it loads rules in envoyproxy/ratelimit's YAML format, matches each request
// descriptor against them, and asks a counter store from package window to
// check and count the matched limits in one atomic step.
//
// Files: rules.go decodes and validates rule files, config.go renders them
// as loaded (GET /rules), match.go walks the compiled tree, server.go
// answers ShouldRateLimit, response.go builds Envoy's response, errors.go
// maps errors to gRPC codes, codec.go is the gRPC codec (it decodes requests
// that are not valid UTF-8), wire.go encodes the hot path's request and
// response by hand.
package envoyrls
