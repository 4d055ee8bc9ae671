// Package xds receives rate limit rules from an xDS server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW and as Envoy
// Gateway serves them: a state-of-the-world subscription, over
// go-control-plane's ADS client, to RateLimitConfig resources, one per
// domain.
//
// A Client turns each push into rules.Files (rules.FromProto), fills in
// what the proto has no field for from Defaults (per-domain failure mode
// and algorithm, per-rule unit multiplier, algorithm and burst), compiles them
// with rules.Options.Compile, the same checks as files, and applies the
// Set; the push is then ACKed. A push that does not compile, or holds a
// resource that is not a RateLimitConfig, is NACKed with every problem in
// error_detail, and the rules last applied keep serving: one bad resource
// never leaves an empty rule set. A broken stream is dialled again after
// a Backoff, the last good rules serving meanwhile.
//
// The dial's credentials come from the caller (Options.DialOptions): the
// package never picks plaintext by itself.
//
// Files: client.go (Client, Options, Status), backoff.go (Backoff),
// defaults.go (Defaults, the per-domain settings file), node.go (node
// metadata and headers in the reference's variable forms).
package xds
