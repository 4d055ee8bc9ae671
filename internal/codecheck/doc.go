// Package codecheck holds checks of the repository's own source that no
// linter makes: no non-test function longer than MaxFuncLines, and no
// Example without an Output comment (go test compiles such an example but
// never runs it). Its tests run them over the whole repository, the bench
// module included, so `make unit` and `make lint` fail when one is broken.
// Reaches lists what a package imports, for the tests that keep a layer
// free of another's dependencies (pkg/window's and pkg/rules' deps_test.go).
package codecheck
