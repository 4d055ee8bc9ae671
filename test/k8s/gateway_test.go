//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
)

// egDeployment is the rate limit Deployment as Envoy Gateway generates it, reduced to what starts and feeds
// the container: the image started with command /bin/ratelimit (envoyproxy/ratelimit's path), Envoy
// Gateway's environment, a read-only root filesystem and a non-root user, the readiness probe on
// /healthcheck. The certificates are left out (TLS off on both sides): the mutual TLS shape is
// cmd/ratelimit-sidecar's TestEnvoyGatewayDeployment. %s is the xDS server's address.
const egDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: envoy-ratelimit
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: envoy-ratelimit}
  template:
    metadata:
      labels: {app.kubernetes.io/name: envoy-ratelimit}
    spec:
      containers:
        - name: envoy-ratelimit
          image: ratelimit-sidecar:dev
          imagePullPolicy: IfNotPresent
          command: ["/bin/ratelimit"]
          env:
            - {name: RUNTIME_ROOT, value: /data}
            - {name: RUNTIME_SUBDIRECTORY, value: ratelimit}
            - {name: RUNTIME_IGNOREDOTFILES, value: "true"}
            - {name: RUNTIME_WATCH_ROOT, value: "false"}
            - {name: LOG_LEVEL, value: info}
            - {name: USE_STATSD, value: "false"}
            - {name: CONFIG_TYPE, value: GRPC_XDS_SOTW}
            - {name: CONFIG_GRPC_XDS_SERVER_URL, value: "%s"}
            - {name: CONFIG_GRPC_XDS_NODE_ID, value: envoy-ratelimit}
            - {name: GRPC_SERVER_USE_TLS, value: "false"}
            - {name: CONFIG_GRPC_XDS_SERVER_USE_TLS, value: "false"}
            - {name: FORCE_START_WITHOUT_INITIAL_CONFIG, value: "true"}
            - {name: REDIS_SOCKET_TYPE, value: tcp}
            - {name: REDIS_URL, value: "redis.default.svc.cluster.local:6379"}
            - {name: USE_PROMETHEUS, value: "true"}
            - {name: PROMETHEUS_ADDR, value: ":19001"}
            - {name: PROMETHEUS_MAPPER_YAML, value: /etc/statsd-exporter/conf.yaml}
          ports:
            - {name: grpc, containerPort: 8081}
            - {name: http, containerPort: 8080}
          readinessProbe:
            httpGet: {path: /healthcheck, port: 8080}
            periodSeconds: 2
          securityContext:
            runAsUser: 65532
            runAsGroup: 65532
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
`

// TestEnvoyGatewayShape starts the sidecar's image in the cluster as Envoy Gateway starts envoyproxy/ratelimit
// and feeds it Envoy Gateway's rules over xDS from a go-control-plane server that the pod reaches on the
// node's address: the pod becomes Ready once the rules came and Redis answers, and a limit of 2 holds.
func TestEnvoyGatewayShape(t *testing.T) {
	node := os.Getenv("RLS_K8S_NODE_IP")
	if node == "" {
		t.Fatal("RLS_K8S_NODE_IP unset: run under scripts/k8s.sh exec")
	}
	root := repoRoot(t)
	redis := filepath.Join(root, "deploy", "k8s", "redis.yaml")
	kubectl(t, "apply", "-f", redis)
	t.Cleanup(func() { kubectlErr("delete", "-f", redis, "--wait=true", "--timeout=60s") })
	srv := xdstest.StartAt(t, node+":0", "envoy-ratelimit")
	version := srv.Push(xdstest.EnvoyGatewayConfig(egListener, 2, rlsconfv3.RateLimitUnit_HOUR))

	f := filepath.Join(t.TempDir(), "eg.yaml")
	if err := os.WriteFile(f, fmt.Appendf(nil, egDeployment, srv.Addr), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubectl(t, "apply", "-f", f)
	t.Cleanup(func() { kubectlErr("delete", "-f", f, "--wait=true", "--timeout=60s") })
	kubectl(t, "rollout", "status", "deployment/envoy-ratelimit", "--timeout="+readyWithin.String())
	srv.WaitAck(version, 30*time.Second)
	t.Logf("Envoy Gateway's shape Ready, rules ACKed, %v after apply", time.Since(start).Round(100*time.Millisecond))
	if n := restarts(t); n != 0 {
		t.Errorf("%d container restarts", n)
	}
	ip := strings.TrimSpace(kubectl(t, "get", "pods", "-l", "app.kubernetes.io/name=envoy-ratelimit", "-o", "jsonpath={.items[0].status.podIP}"))
	conn, err := grpc.NewClient("passthrough:///"+ip+":8081", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	user := fmt.Sprint("u", time.Now().UnixNano())
	var es []*rlv3.RateLimitDescriptor_Entry
	for _, e := range xdstest.EnvoyGatewayEntries(user) {
		es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egListener, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: es}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.GetOverallCode())
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("codes %v, want %v (limit 2 pushed over xDS)", codes, want)
	}
}

// egListener is the domain Envoy Gateway gives a listener's rules: namespace/gateway/listener.
const egListener = "default/eg/http"
