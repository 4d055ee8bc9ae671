package window_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/codecheck"
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

// TestImportsNoClientOrLogger keeps pkg/window free of go-redis, zap, gRPC
// and Envoy. The Redis clock lives in redisstore for this reason; the
// redisstore case checks that the check sees such a dependency at all.
func TestImportsNoClientOrLogger(t *testing.T) {
	t.Parallel()
	codecheck.CheckLayers(t, func(p string) bool {
		return slices.ContainsFunc(forbidden, func(f string) bool {
			return strings.HasPrefix(p, f) || p == strings.TrimSuffix(f, "/")
		})
	},
		codecheck.Layer{Pkg: ".", Reached: false},
		codecheck.Layer{Pkg: "./redisstore", Reached: true},
	)
}
