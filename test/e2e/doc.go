// Package e2e holds the end-to-end tests of ratelimit-sidecar: real processes on free loopback ports, wired as
// two pods of the edge deployment that share one Redis.
//
//	client ─┬─ Envoy A (failure_mode_deny: false) ── sidecar A ─┬─ redis-server
//	        └─ Envoy B (failure_mode_deny: true)  ── sidecar B ─┘
//	           both route to an upstream HTTP server inside the test process
//
// The Envoy bootstraps come from testdata/envoy.yaml.tmpl, which renders to deploy/envoy.yaml when given that
// file's ports, domain and filter settings (TestEnvoyTemplateMirrorsDeploy checks this), and the rules from
// testdata/rules.yaml: the shapes of deploy/rules/edge.yaml with small limits and short windows.
//
// Two tests stand beside envoyproxy/ratelimit: TestReferenceSuite reproduces its integration scripts
// (testdata/refsuite*.yaml* mirror its example configs) with the sidecar started as its compose file starts
// /bin/ratelimit, and TestMigrationSharesCounters runs the reference itself, built from the Go module proxy
// (reference.go), beside a sidecar with -reference-keys on one redis-server.
//
// The tests sit behind the e2e build tag because they need redis-server on PATH and Envoy 1.40 (scripts/envoy.sh
// installs it into .tools/), and they sleep across real windows:
//
//	go test -tags e2e -race -count=1 -v ./test/e2e/
package e2e
