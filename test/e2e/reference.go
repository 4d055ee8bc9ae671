//go:build e2e

package e2e

import (
	"fmt"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// referencePkg is envoyproxy/ratelimit's main package at 3fb7025
// (2026-01-22), the newest commit the Go module proxy serves; the bench
// harness runs the same build. Its key layout and counting
// (src/limiter/cache_key.go, src/redis/fixed_cache_impl.go) are those of
// its main at f2fb157: the commits between only fix typos, add
// parallelism and retries at start, and pass contexts.
const referencePkg = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

var (
	referenceOnce sync.Once
	referenceBin  string
	referenceErr  error
)

// referenceBinary returns envoyproxy/ratelimit's binary, built once with go
// install from the module proxy into the user's cache directory, where
// later runs find it (and Go's build cache keeps a rebuild cheap).
func referenceBinary(t *testing.T) string {
	t.Helper()
	referenceOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			referenceErr = err
			return
		}
		dir := filepath.Join(cache, "ratelimit-sidecar", "reference", strings.ReplaceAll(referencePkg[strings.LastIndexByte(referencePkg, '@')+1:], "/", "_"))
		bin := filepath.Join(dir, "service_cmd")
		if _, err := os.Stat(bin); err == nil {
			referenceBin = bin
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			referenceErr = err
			return
		}
		cmd := exec.Command("go", "install", referencePkg)
		// Outside this module, without its build tags: the reference's own module decides.
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			referenceErr = fmt.Errorf("go install %s: %w\n%s", referencePkg, err, out)
			return
		}
		referenceBin = bin
	})
	if referenceErr != nil {
		t.Fatal(referenceErr)
	}
	return referenceBin
}

// reference is one envoyproxy/ratelimit process on loopback.
type reference struct {
	*proc
	GRPCAddr string
}

// startReference starts envoyproxy/ratelimit with env (more variables:
// Redis, behaviour) reading the rules file rules, on free loopback ports,
// and waits until its /healthcheck answers 200.
func startReference(t *testing.T, name, rules string, env ...string) *reference {
	t.Helper()
	root := t.TempDir()
	config := filepath.Join(root, "current", "config")
	if err := os.MkdirAll(config, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rules)
	if err == nil {
		err = os.WriteFile(filepath.Join(config, filepath.Base(rules)), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	ports, err := proctest.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=current", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}
	p := startProcEnv(t, name, referenceBinary(t), append(base, env...))
	waitHTTP(t, name+" /healthcheck", "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthcheck", p, time.Now().Add(startTimeout))
	return &reference{proc: p, GRPCAddr: "127.0.0.1:" + strconv.Itoa(ports[1])}
}
