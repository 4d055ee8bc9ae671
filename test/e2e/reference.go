//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/reftest"
)

// statOK reports whether path exists.
func statOK(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

var (
	referenceOnce sync.Once
	referenceBin  string
	referenceErr  error
)

// referenceBinary returns envoyproxy/ratelimit's binary (reftest.Pkg), built
// once into the user's cache directory, where later runs find it.
func referenceBinary(t *testing.T) string {
	t.Helper()
	referenceOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			referenceErr = err
			return
		}
		dir := filepath.Join(cache, "ratelimit-sidecar", "reference", strings.ReplaceAll(reftest.Version(), "/", "_"))
		if bin := filepath.Join(dir, "service_cmd"); statOK(bin) {
			referenceBin = bin
			return
		}
		referenceBin, referenceErr = reftest.Install(context.Background(), dir)
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
