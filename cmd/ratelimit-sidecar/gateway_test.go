package main

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
)

// envoyGatewayDeploymentEnv is, name for name and value for value, the
// environment of the rate limit Deployment Envoy Gateway generates (its
// default, Redis without TLS, Prometheus on), with the xDS server and Redis
// at the given addresses and the certificate files in certs, the Secret
// envoy-rate-limit that Deployment mounts at /certs. refEnv adds what a
// test on one machine needs: every listener on a free port of the loopback
// (REDIS_TIMEOUT stays unset, as Envoy Gateway leaves it: the reference's
// 10s, which a loaded machine cannot miss); the xDS backoff
// variables, which Envoy Gateway leaves at 10s and 60s, are spaced for a
// test.
func envoyGatewayDeploymentEnv(xdsAddr, redisAddr string, certs *tlstest.Mount) map[string]string {
	return refEnv(map[string]string{
		"RUNTIME_ROOT":                       "/data",
		"RUNTIME_SUBDIRECTORY":               "ratelimit",
		"RUNTIME_IGNOREDOTFILES":             "true",
		"RUNTIME_WATCH_ROOT":                 "false",
		"LOG_LEVEL":                          "info",
		"USE_STATSD":                         "false",
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         xdsAddr,
		"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS":                "true",
		"GRPC_SERVER_TLS_CERT":               certs.Path("tls.crt"),
		"GRPC_SERVER_TLS_KEY":                certs.Path("tls.key"),
		"GRPC_SERVER_TLS_CA_CERT":            certs.Path("ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    certs.Path("tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     certs.Path("tls.key"),
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  certs.Path("ca.crt"),
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE":                  "tcp",
		"REDIS_URL":                          redisAddr,
		"USE_PROMETHEUS":                     "true",
		"PROMETHEUS_ADDR":                    "127.0.0.1:0",
		"PROMETHEUS_MAPPER_YAML":             "/etc/statsd-exporter/conf.yaml",

		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL":     "200ms",
	})
}

// egServerSerial asks once for user on Envoy Gateway's route over a new
// connection with creds, and returns the serial of the sidecar's
// certificate.
func egServerSerial(t *testing.T, addr string, creds credentials.TransportCredentials, user string) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var es []*rlv3.RateLimitDescriptor_Entry
	for _, e := range xdstest.EnvoyGatewayEntries(user) {
		es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
		&rlsv3.RateLimitRequest{Domain: egListener, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: es}}}, grpc.Peer(&p))
	if err != nil {
		return nil, err
	}
	return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber, nil
}

// wantClientSerials checks that the xDS server saw only want as the client
// certificate of its streams.
func wantClientSerials(t *testing.T, what string, srv *xdstest.Server, want *big.Int) {
	t.Helper()
	got := srv.ClientSerials()
	if len(got) == 0 {
		t.Errorf("%s: the xDS server saw no client certificate", what)
	}
	for _, s := range got {
		if s.Cmp(want) != 0 {
			t.Errorf("%s: the xDS server saw client certificate %x, want only %x", what, s, want)
		}
	}
}

// TestEnvoyGatewayDeployment is issue 16's "done when": the built binary
// started with exactly the environment of Envoy Gateway's Deployment, its
// certificates a Secret mount, rules pushed by an xDS server with mutual
// TLS in the shape Envoy Gateway generates, answers over gRPC with mutual
// TLS to an Envoy holding its own certificate of the same CA.
func TestEnvoyGatewayDeployment(t *testing.T) {
	t.Parallel()
	// One CA, as Envoy Gateway's certgen makes: the xDS server's certificate
	// (its Service names; the loopback stands in for them), the sidecar's
	// and Envoy's, each for *.envoy-gateway-system.
	ca := tlstest.NewCA(t, "envoy-gateway")
	xdsCert := ca.Issue(t, "envoy-gateway", "envoy-gateway.envoy-gateway-system", "127.0.0.1")
	rl1 := ca.Issue(t, "*.envoy-gateway-system")
	certs := tlstest.NewMount(t) // Secret envoy-rate-limit at /certs
	certs.Write(t, tlstest.Files(ca, rl1))
	envoy := tlstest.NewMount(t)
	envoy.Write(t, tlstest.Files(ca, ca.Issue(t, "*.envoy-gateway-system")))

	redis := redistest.Start(t)
	srv := xdstest.StartTLS(t, "envoy-ratelimit", xdsCert, ca)
	p := startWithEnv(t, envoyGatewayDeploymentEnv(srv.Addr, redis.Addr, certs))
	waitHealthcheck(t, p, 200) // the readiness probe, before any push
	c := rlsv3.NewRateLimitServiceClient(envoyConn(t, p.grpcAddr, envoyCreds(t, envoy)))

	// Each push is served.
	v := srv.Push(xdstest.EnvoyGatewayConfig(egListener, 2, rlsconfv3.RateLimitUnit_HOUR))
	srv.WaitAck(v, 10*time.Second)
	wantAllowed(t, c, "alice", 2)
	wantClientSerials(t, "first connection", srv, rl1.Cert.SerialNumber)

	// A bad push is NACKed; the last good rules serve.
	v = srv.Push(xdstest.EnvoyGatewayConfig(egListener, 5, rlsconfv3.RateLimitUnit_UNKNOWN))
	if msg := srv.WaitNack(v, 10*time.Second); !strings.Contains(msg, "rate_limit.unit: missing") {
		t.Errorf("NACK error_detail = %q, want the problem", msg)
	}
	wantAllowed(t, c, "bob", 2)

	// The xDS server restarts on its port with its certificates: the rules
	// serve meanwhile, and its next push is applied.
	srv.Stop()
	wantAllowed(t, c, "carol", 2)
	srv = xdstest.StartTLSAt(t, srv.Addr, "envoy-ratelimit", xdsCert, ca)
	srv.WaitAck(srv.Push(xdstest.EnvoyGatewayConfig(egListener, 3, rlsconfv3.RateLimitUnit_HOUR)), 10*time.Second)
	wantAllowed(t, c, "dave", 3)

	// The Secret rotates: a new connection of Envoy's sees the sidecar's new
	// certificate, and the xDS server, restarted, the new client
	// certificate, since both are the same files.
	rl2 := ca.Issue(t, "*.envoy-gateway-system")
	certs.Write(t, tlstest.Files(ca, rl2))
	got, err := egServerSerial(t, p.grpcAddr, envoyCreds(t, envoy), "erin")
	wantServerSerial(t, "after the rotation", got, err, rl2.Cert, p)
	srv.Stop()
	srv = xdstest.StartTLSAt(t, srv.Addr, "envoy-ratelimit", xdsCert, ca)
	srv.WaitAck(srv.Push(xdstest.EnvoyGatewayConfig(egListener, 4, rlsconfv3.RateLimitUnit_HOUR)), 10*time.Second)
	wantAllowed(t, c, "frank", 4)
	wantClientSerials(t, "after the rotation", srv, rl2.Cert.SerialNumber)

	waitHealthcheck(t, p, 200)
	if p.metrics == "" {
		t.Fatalf("USE_PROMETHEUS=true: no metrics listener; log:\n%s", p.log)
	}
	_, body := httpGet(t, "http://"+p.metrics+"/metrics")
	if !hasMetric(body, "ratelimit_service_rate_limit_total_hits{", `domain="`+egListener+`"`) {
		t.Errorf("GET /metrics lacks ratelimit_service_rate_limit_total_hits of domain %s:\n%s", egListener, body)
	}
}

// envoyConn is a connection to addr with creds, closed when the test ends.
func envoyConn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// hasMetric reports whether a line of the exposition body starts with
// prefix and holds label.
func hasMetric(body, prefix, label string) bool {
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, label) {
			return true
		}
	}
	return false
}
