// Package rules loads rate-limit rules in envoyproxy/ratelimit's YAML format
// and matches request descriptors against them.
//
// Each file holds one domain: a tree of descriptors (a key, an optional
// value) with the limits that apply when a request's descriptor walks down
// to them. Load reads a file or a directory of them; Parse does the same
// from contents in memory. Either returns a *Set, immutable and safe for
// concurrent use, or an *Error that lists every problem of every file with
// its file, line and field.
//
// Files: load.go reads files and directories, rules.go decodes and
// compiles them, match.go walks the compiled tree, json.go renders a Set as
// loaded (GET /rules), and problem.go holds Problem and Error.
package rules
