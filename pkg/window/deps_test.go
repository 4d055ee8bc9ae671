package window_test

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are the import paths, by prefix, that pkg/window must not reach
// even indirectly: it is window arithmetic and keys, and the Redis client,
// the logger and the Envoy and gRPC types belong to the packages that use it.
var forbidden = []string{
	"github.com/redis/go-redis/",
	"go.uber.org/zap",
	"google.golang.org/grpc",
	"github.com/envoyproxy/",
}

// deps returns the packages pkg imports, directly or not, that start with
// one of prefixes, as `go list -deps` reports them (go test puts its own go
// first on PATH).
func deps(t *testing.T, pkg string, prefixes []string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		for _, f := range prefixes {
			if strings.HasPrefix(p, f) || p == strings.TrimSuffix(f, "/") {
				found = append(found, p)
				break
			}
		}
	}
	return found
}

// TestImportsNoClientOrLogger keeps pkg/window free of go-redis, zap, gRPC
// and Envoy. The Redis clock lives in redisstore for this reason; the
// redisstore case checks that the check sees such a dependency at all.
func TestImportsNoClientOrLogger(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pkg  string
		want bool // some forbidden package is among its deps
	}{
		{".", false},
		{"./redisstore", true},
	} {
		got := deps(t, tt.pkg, forbidden)
		if (len(got) > 0) != tt.want {
			t.Errorf("go list -deps %s reaches %v; want forbidden packages: %v", tt.pkg, got, tt.want)
		}
	}
}
