// Package rules loads rate-limit rules in envoyproxy/ratelimit's YAML format
// and matches request descriptors against them.
//
// Each file holds one domain: a tree of descriptors (a key, an optional
// value) with the limits that apply when a request's descriptor walks down
// to them. Rules go through three steps:
//
//   - Decode turns one file's YAML into a File: typed structs holding the
//     values as written, with the path and line of each (Pos). It is strict:
//     unknown or repeated fields and values of the wrong kind are problems.
//   - Compile checks Files (required fields, names of units, algorithms and
//     failure modes, window sizes, wildcard patterns, duplicate descriptors
//     and domains), resolves what limits inherit, and builds a Set: per
//     domain, a match tree whose nodes hold compiled Limits, wildcards
//     compiled into small matchers. A File made by another decoder
//     (FromProto, of an xDS RateLimitConfig, or DecodeProto of its JSON or
//     YAML form) compiles the same way.
//   - Domain.Match walks a request descriptor's entries down the tree, as
//     envoyproxy/ratelimit does, without allocating. Each Limit knows the
//     path of nodes that leads to it, which is the path a matching
//     descriptor took: what a server needs for counter keys
//     (share_threshold) and metric labels (value_to_metric).
//
// Load reads a file, or a directory of them, and Parse decodes and compiles
// contents in memory; Options (merging one domain's files) change both.
// Every step reports all problems of all files at once, each with file,
// line and field, in an *Error that wraps ErrInvalid, and each mistake
// once: no knock-on problems. A Set is immutable and safe for concurrent
// use; its JSON is its Files as decoded, for GET /rules.
//
// A new rule field is a field of the decoded struct (and its case in the
// decoder, and in FromProto if the proto carries it), and its check and
// effect in compile.
//
// Names: package rules holds rules, so its types do not repeat the word:
// rules.Set (a loaded set of domains), rules.Domain, rules.Limit, rules.Error,
// rules.Load.
//
// Files: decode.go (YAML to File), metadata.go (descriptor metadata, YAML
// to structpb), proto.go (an xDS RateLimitConfig to File), compile.go
// (File to Set), set.go (Set and Domain), limit.go (Limit and
// FailureMode), pattern.go (wildcard values), match.go (the tree and
// Match), path.go (a limit's path: counter-key values and metric labels),
// load.go (Options, Load and Parse), problem.go (Problem and Error).
package rules
