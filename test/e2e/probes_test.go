//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
)

// TestManifestProbesWithRedisDown runs the ratelimit sidecar as deploy/k8s/deployment.yaml does, with its
// Redis unreachable from the start, and makes each probe the manifest gives that container the way the kubelet
// would. Every one must pass, again and again over several health intervals: a Redis outage must neither
// restart the sidecar (liveness) nor keep the pod, and with it Envoy, out of the Service (startup, readiness),
// and a cold start with Redis down must become Ready. The store's state is still reported, as NOT_SERVING on
// gRPC health and 503 on /readyz, which the test checks first, so it cannot pass with Redis secretly up.
func TestManifestProbesWithRedisDown(t *testing.T) {
	c := manifestContainer(t, "ratelimit")
	closed := closedPort(t)
	p := startProc(t, "ratelimit", sidecarBin, "-config", filepath.Join(repoRoot, "deploy", "rules"),
		"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-log-format", "json",
		"-redis-url", "redis://"+closed+"/0", "-redis-timeout", "50ms", "-health-interval", "100ms")
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("SIGTERM: %v, want exit status 0", err)
		}
	})
	var grpcAddr, httpAddr string
	for deadline := time.Now().Add(startTimeout); grpcAddr == "" || httpAddr == ""; time.Sleep(10 * time.Millisecond) {
		if p.Exited() {
			t.Fatalf("exited before serving with Redis down: %v", p.Wait())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"serving\" line within %v", startTimeout)
		}
		grpcAddr, httpAddr, _ = sidecartest.ServingAddrs(p.Output())
	}
	// The ports the manifest's flags give the sidecar, mapped to where this process listens.
	addrs := map[int32]string{flagPort(t, c, "-grpc-addr", config.DefaultGRPCAddr): grpcAddr, flagPort(t, c, "-http-addr", config.DefaultHTTPAddr): httpAddr}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	// Redis is seen as down: what the old gRPC probes asked.
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	cancel()
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("grpc.health.v1 Check = %v, %v; want NOT_SERVING while Redis is down", resp.GetStatus(), err)
	}
	if code := httpStatus("http://" + httpAddr + "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz = %d, want 503 while Redis is down", code)
	}

	probes := map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe}
	made := 0
	for round := 0; round < 10; round++ { // ten health intervals
		for name, pr := range probes {
			if pr == nil {
				continue
			}
			made++
			if err := kubeletProbe(c, pr, addrs, health); err != nil {
				t.Errorf("round %d: %s fails with Redis down: %v", round, name, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if made == 0 {
		t.Fatal("the container has no probes")
	}
}

// manifestContainer is the init container name of the edge Deployment in deploy/k8s/deployment.yaml.
func manifestContainer(t *testing.T, name string) *corev1.Container {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "k8s", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &d); err != nil {
		t.Fatal(err)
	}
	for i, c := range d.Spec.Template.Spec.InitContainers {
		if c.Name == name {
			return &d.Spec.Template.Spec.InitContainers[i]
		}
	}
	t.Fatalf("deployment.yaml: no init container %q", name)
	return nil
}

// flagPort is the port of the listen address flag in c's args, or of def.
func flagPort(t *testing.T, c *corev1.Container, flag, def string) int32 {
	t.Helper()
	addr := def
	for i, a := range c.Args {
		if a == flag && i+1 < len(c.Args) {
			addr = c.Args[i+1]
		}
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", flag, addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("%s %q: %v", flag, addr, err)
	}
	return int32(n)
}

// closedPort returns a loopback host:port that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func httpStatus(url string) int {
	resp, err := (&http.Client{Timeout: time.Second}).Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// kubeletProbe makes probe p of container c as the kubelet would: httpGet passes on 200-399, tcpSocket on a
// connect, grpc on SERVING for its service (default ""). addrs maps c's container ports to where they listen.
func kubeletProbe(c *corev1.Container, p *corev1.Probe, addrs map[int32]string, health healthpb.HealthClient) error {
	port := func(ip intstr.IntOrString) (string, error) {
		n := ip.IntVal
		if ip.Type == intstr.String {
			n = 0
			for _, cp := range c.Ports {
				if cp.Name == ip.StrVal {
					n = cp.ContainerPort
				}
			}
		}
		if a, ok := addrs[n]; ok {
			return a, nil
		}
		return "", fmt.Errorf("port %s is none of the sidecar's listeners", ip.String())
	}
	switch {
	case p.HTTPGet != nil:
		a, err := port(p.HTTPGet.Port)
		if err != nil {
			return err
		}
		if code := httpStatus("http://" + a + p.HTTPGet.Path); code < 200 || code >= 400 {
			return fmt.Errorf("GET %s = %d", p.HTTPGet.Path, code)
		}
	case p.TCPSocket != nil:
		a, err := port(p.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			return err
		}
		conn.Close()
	case p.GRPC != nil:
		if _, err := port(intstr.FromInt32(p.GRPC.Port)); err != nil {
			return err
		}
		svc := ""
		if p.GRPC.Service != nil {
			svc = *p.GRPC.Service
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("grpc health %q = %v", svc, resp.GetStatus())
		}
	default:
		return fmt.Errorf("probe handler %s not made by this test", strings.TrimSpace(p.String()))
	}
	return nil
}
