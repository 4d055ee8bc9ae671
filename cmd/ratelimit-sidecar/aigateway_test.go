package main

import (
	"slices"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// aiGatewayNode is the xDS node id of AI Gateway's rate limit Deployment.
const aiGatewayNode = "envoy-ai-gateway-ratelimit"

// aiGatewayDeploymentEnv is the environment of AI Gateway v1.1's published
// rate limit Deployment (tests/e2e/testdata/backend_quota_ratelimit.yaml),
// with its xDS server and Redis here. refEnv then puts the listeners on
// free loopback ports (the Deployment sets GRPC_PORT=8081) and gives Redis
// a timeout a loaded test machine cannot miss.
func aiGatewayDeploymentEnv(xdsAddr, redisAddr string) map[string]string {
	return refEnv(map[string]string{
		"LOG_LEVEL":                  "debug",
		"REDIS_SOCKET_TYPE":          "tcp",
		"REDIS_URL":                  redisAddr,
		"RUNTIME_ROOT":               "/data",
		"RUNTIME_SUBDIRECTORY":       "ratelimit",
		"USE_STATSD":                 "false",
		"CONFIG_TYPE":                "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID":    aiGatewayNode,
		"CONFIG_GRPC_XDS_SERVER_URL": xdsAddr,
		"GRPC_PORT":                  "8081",
	})
}

// quotaPolicyConfig is the RateLimitConfig AI Gateway's controller pushes
// for a QuotaPolicy whose perModelQuotas give model a default bucket of
// limit tokens per hour and no bucket rules, targeting backends
// ("namespace/name"): its internal/ratelimit/translator's BuildRateLimitConfigs,
// one domain, a backend_name descriptor per backend, quota_mode on the model.
func quotaPolicyConfig(model string, limit uint32, backends ...string) *rlsconfv3.RateLimitConfig {
	cfg := &rlsconfv3.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota"}
	for _, b := range backends {
		cfg.Descriptors = append(cfg.Descriptors, &rlsconfv3.RateLimitDescriptor{
			Key: "backend_name", Value: b,
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "model_name_override", Value: model,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: limit},
				QuotaMode: true,
			}},
		})
	}
	return cfg
}

// quotaDescriptor is what AI Gateway's route sends for a backend: at
// request time generic keys and no hits_addend (tokens 0); at stream end
// the same entries from dynamic metadata with the tokens used as the
// descriptor's hits_addend.
func quotaDescriptor(backend, model string, tokens uint64) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
		{Key: "backend_name", Value: backend}, {Key: "model_name_override", Value: model}}}
	if tokens > 0 {
		d.HitsAddend = wrapperspb.UInt64(tokens)
	}
	return d
}

// TestAIGatewayDeployment starts the built binary exactly as AI Gateway
// v1.1's Deployment does (/bin/ratelimit, its argument and environment)
// against a plaintext xDS server that pushes a QuotaPolicy's
// RateLimitConfig, and spends the token budgets as AI Gateway's Envoy
// does: a check per request of every targeted backend, a charge of the
// tokens used at stream end. The budget holds (check OK, charge; check OK,
// charge; check OVER_LIMIT), and a request targeting two backends is
// OVER_LIMIT only when both are spent.
func TestAIGatewayDeployment(t *testing.T) {
	t.Parallel()
	// The budgets are per hour of the wall clock: keep the test in one.
	if left := window.At(time.Now(), time.Hour).Until(time.Now().UnixMilli()); left < 20*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	redis := redistest.Start(t)
	srv := xdstest.Start(t, aiGatewayNode)
	p := startAs(t, "/bin/ratelimit", aiGatewayArgs, aiGatewayDeploymentEnv(srv.Addr, redis.Addr))
	const model = "quota-test-model"
	v := srv.Push(quotaPolicyConfig(model, 10, "default/one", "default/a", "default/b"))
	srv.WaitAck(v, 10*time.Second)
	if nodes := srv.Nodes(); !slices.Contains(nodes, aiGatewayNode) {
		t.Errorf("xDS nodes %q, want %s", nodes, aiGatewayNode)
	}
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpcAddr))
	const ok, over = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	type step struct {
		backends []string
		tokens   uint64 // 0: the request-time check
		want     rlsv3.RateLimitResponse_Code
	}
	run := func(name string, steps []step) {
		for i, s := range steps {
			var ds []*rlv3.RateLimitDescriptor
			for _, b := range s.backends {
				ds = append(ds, quotaDescriptor(b, model, s.tokens))
			}
			resp := ask(t, c, "ai-gateway-quota", ds...)
			if s.tokens > 0 {
				continue // Envoy ignores the answer to a charge at stream end
			}
			if resp.OverallCode != s.want {
				t.Errorf("%s step %d: check of %v = %v, want %v; statuses %v", name, i, s.backends, resp.OverallCode, s.want, resp.Statuses)
			}
		}
	}
	run("one backend", []step{
		{[]string{"default/one"}, 0, ok}, {[]string{"default/one"}, 7, 0},
		{[]string{"default/one"}, 0, ok}, {[]string{"default/one"}, 7, 0},
		{[]string{"default/one"}, 0, over},
	})
	both := []string{"default/a", "default/b"}
	run("two backends", []step{
		{both, 0, ok}, {[]string{"default/a"}, 9, 0},
		{both, 0, ok}, // a spent, b has room
		{[]string{"default/b"}, 9, 0},
		{both, 0, over},
		{both, 0, over},
	})
	if p.log.count("arguments ignored: started as ratelimit, which ignores its command line") != 1 {
		t.Errorf("no log line for the ignored argument; log:\n%s", p.log)
	}
}
