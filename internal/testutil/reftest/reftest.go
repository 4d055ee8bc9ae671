// Package reftest builds envoyproxy/ratelimit, the server the sidecar
// replaces, for the tests and benchmarks that run it beside the sidecar:
// one pinned version, built one way.
package reftest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Pkg is envoyproxy/ratelimit's main package at 3fb7025 (2026-01-22), the
// newest commit the Go module proxy serves (the project tags no releases
// since v1.4.0 of 2020). Its key layout and counting
// (src/limiter/cache_key.go, src/redis/fixed_cache_impl.go) are those of its
// main at f2fb157: the commits between only fix typos, add parallelism and
// retries at start, and pass contexts.
const Pkg = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// Version is Pkg's module version, for naming a cache directory.
func Version() string { return Pkg[strings.LastIndexByte(Pkg, '@')+1:] }

// Install builds Pkg with go install from the module proxy into dir and
// returns the binary's path. It builds outside this module and without its
// GOFLAGS (build tags): the reference's own module decides how it is built.
// Go's build cache keeps a second build cheap.
func Install(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "install", Pkg)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %w\n%s", Pkg, err, out)
	}
	return filepath.Join(dir, "service_cmd"), nil
}
