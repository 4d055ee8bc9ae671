package main

import (
	"context"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/sidecartest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tlsconfig"
)

// rateLimitSAN is a name of the sidecar's certificate, as Envoy Gateway
// issues it (*.envoy-gateway-system).
const rateLimitSAN = "envoy-ratelimit.envoy-gateway-system"

// tlsAsk asks for j=v of domain rl on a new connection to addr with creds,
// and returns the serial of the server's certificate.
func tlsAsk(t *testing.T, addr string, creds credentials.TransportCredentials) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}, grpc.Peer(&p))
	if err != nil {
		return nil, err
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over TLS = %v, want OK", resp.OverallCode)
	}
	return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber, nil
}

// envoyCreds are Envoy's side: the client certificate of mount m, and the
// CA in it for the server's.
func envoyCreds(t *testing.T, m *tlstest.Mount) credentials.TransportCredentials {
	t.Helper()
	creds, err := tlsconfig.Client(tlsconfig.ClientOptions{CertFile: m.Path("tls.crt"), KeyFile: m.Path("tls.key"),
		CAFile: m.Path("ca.crt"), ServerName: rateLimitSAN})
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func wantServerSerial(t *testing.T, what string, got *big.Int, err error, want *x509.Certificate, p *refProcess) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: ShouldRateLimit: %v; log:\n%s", what, err, p.log)
	}
	if got.Cmp(want.SerialNumber) != 0 {
		t.Fatalf("%s: server certificate serial %x, want %x", what, got, want.SerialNumber)
	}
}

// TestGRPCMutualTLS starts the binary with the gRPC server's TLS variables
// of Envoy Gateway's Deployment, its certificates a Secret mount, and
// rotates them.
func TestGRPCMutualTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "envoy-gateway")
	a := ca.Issue(t, "*.envoy-gateway-system")
	certs := tlstest.NewMount(t)
	certs.Write(t, tlstest.Files(ca, a))
	envoy := tlstest.NewMount(t)
	envoy.Write(t, tlstest.Files(ca, ca.Issue(t, "*.envoy-gateway-system")))

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "config.yaml"), []byte(compatRules("100")), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startWithEnv(t, refEnv(map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false", "LOG_LEVEL": "info",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": certs.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": certs.Path("tls.key"),
		"GRPC_SERVER_TLS_CA_CERT": certs.Path("ca.crt"),
	}))
	got, err := tlsAsk(t, p.grpcAddr, envoyCreds(t, envoy))
	wantServerSerial(t, "cert A", got, err, a.Cert, p)

	noCert, err := tlsconfig.Client(tlsconfig.ClientOptions{CAFile: envoy.Path("ca.crt"), ServerName: rateLimitSAN})
	if err != nil {
		t.Fatal(err)
	}
	otherCA := tlstest.NewCA(t, "other")
	other := tlstest.NewMount(t)
	stranger := otherCA.Issue(t, "*.envoy-gateway-system")
	other.Write(t, map[string][]byte{"tls.crt": stranger.CertPEM, "tls.key": stranger.KeyPEM, "ca.crt": ca.PEM})
	for name, creds := range map[string]credentials.TransportCredentials{
		"no client certificate":            noCert,
		"client certificate of another CA": envoyCreds(t, other),
		"plaintext":                        insecure.NewCredentials(),
	} {
		if _, err := tlsAsk(t, p.grpcAddr, creds); err == nil {
			t.Errorf("%s: ShouldRateLimit answered, want refused", name)
		}
		if err := tlsReport(t, p.grpcAddr, creds); err == nil {
			t.Errorf("%s: RLQS answered, want refused", name)
		}
	}
	// RLQS is served on the same listener, behind the same mutual TLS.
	if err := tlsReport(t, p.grpcAddr, envoyCreds(t, envoy)); err != nil {
		t.Errorf("RLQS over mutual TLS: %v", err)
	}
	// The HTTP listener stays plaintext.
	if code, body := httpGet(t, "http://"+p.httpAddr+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("GET /healthcheck = %d %q, want 200 OK", code, body)
	}

	// cert-manager rotates the certificate in place: new key, same CA.
	b := ca.Issue(t, "*.envoy-gateway-system")
	certs.Write(t, tlstest.Files(ca, b))
	got, err = tlsAsk(t, p.grpcAddr, envoyCreds(t, envoy))
	wantServerSerial(t, "cert B", got, err, b.Cert, p)

	// A bad rotation keeps cert B serving.
	certs.Write(t, map[string][]byte{"tls.crt": []byte("junk"), "tls.key": b.KeyPEM, "ca.crt": ca.PEM})
	got, err = tlsAsk(t, p.grpcAddr, envoyCreds(t, envoy))
	wantServerSerial(t, "bad cert file", got, err, b.Cert, p)

	// A new CA on both sides.
	ca2 := tlstest.NewCA(t, "envoy-gateway-2")
	c := ca2.Issue(t, "*.envoy-gateway-system")
	certs.Write(t, tlstest.Files(ca2, c))
	if _, err := tlsAsk(t, p.grpcAddr, envoyCreds(t, envoy)); err == nil {
		t.Error("client of the old CA after the CA rotated: answered, want refused")
	}
	envoy.Write(t, tlstest.Files(ca2, ca2.Issue(t, "*.envoy-gateway-system")))
	got, err = tlsAsk(t, p.grpcAddr, envoyCreds(t, envoy))
	wantServerSerial(t, "cert C, new CA", got, err, c.Cert, p)

	log := p.log.String()
	for msg, want := range map[string]int{
		"tls: loaded certificates":   1,
		"tls: reloaded certificates": 2,
		"tls: a changed certificate file cannot be used; the last good certificates are kept": 1,
	} {
		if got := strings.Count(log, `"msg":"`+msg+`"`); got != want {
			t.Errorf("%d log lines %q, want %d; log:\n%s", got, msg, want, log)
		}
	}
}

// TestGRPCTLSStartErrors: TLS that was asked for and cannot be served
// stops the start, with the setting named, rather than serve plaintext.
func TestGRPCTLSStartErrors(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	m := tlstest.NewMount(t)
	m.Write(t, tlstest.Files(ca, ca.Issue(t, "localhost")))
	rules := writeRules(t, goodRules(1))
	base := func(kv ...string) map[string]string {
		vars := map[string]string{"RLS_CONFIG": rules, "RLS_GRPC_ADDR": "127.0.0.1:0", "RLS_HTTP_ADDR": "127.0.0.1:0"}
		for i := 0; i+1 < len(kv); i += 2 {
			vars[kv[i]] = kv[i+1]
		}
		return vars
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no certificate", base("GRPC_SERVER_USE_TLS", "true"), "needs -grpc-tls-cert and -grpc-tls-key"},
		{"missing cert file", base("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", missing, "GRPC_SERVER_TLS_KEY", m.Path("tls.key")), "GRPC_SERVER_TLS_CERT"},
		{"key of nothing", base("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", m.Path("tls.crt"), "GRPC_SERVER_TLS_KEY", m.Path("ca.crt")), "GRPC_SERVER_TLS_KEY"},
		{"bad CA", base("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", m.Path("tls.crt"), "GRPC_SERVER_TLS_KEY", m.Path("tls.key"), "GRPC_CLIENT_TLS_CACERT", m.Path("tls.key")), "GRPC_CLIENT_TLS_CACERT"},
		{"RLS_ file", base("RLS_GRPC_TLS_CERT", missing, "RLS_GRPC_TLS_KEY", m.Path("tls.key")), "-grpc-tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log sidecartest.Buffer
			err := run(context.Background(), nil, env(tc.env), io.Discard, &log)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run = %v, want an error naming %s; log:\n%s", err, tc.want, log.String())
			}
			if strings.Contains(log.String(), `"msg":"serving"`) {
				t.Errorf("served; log:\n%s", log.String())
			}
		})
	}
}

// TestXDSClientCredentials connects with the xDS client's credentials to a
// gRPC server with mutual TLS, as Envoy Gateway's xDS server is, on
// loopback.
func TestXDSClientCredentials(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "envoy-gateway")
	srv := tlstest.NewMount(t)
	srv.Write(t, tlstest.Files(ca, ca.Issue(t, "envoy-gateway", "envoy-gateway.envoy-gateway-system")))
	cfg, err := tlsconfig.Server(tlsconfig.ServerOptions{CertFile: srv.Path("tls.crt"), KeyFile: srv.Path("tls.key"), ClientCAFile: srv.Path("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)

	certs := tlstest.NewMount(t)
	certs.Write(t, tlstest.Files(ca, ca.Issue(t, "*.envoy-gateway-system")))
	healthCheck := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	creds, err := xdsClientCredentials(certs.Path("tls.crt"), certs.Path("tls.key"), certs.Path("ca.crt"), "envoy-gateway", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := healthCheck(creds); err != nil {
		t.Errorf("health over mutual TLS: %v", err)
	}
	noCert, err := xdsClientCredentials("", "", certs.Path("ca.crt"), "envoy-gateway", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := healthCheck(noCert); err == nil {
		t.Error("health without a client certificate: answered, want refused")
	}

	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name                string
		cert, key, ca, want string
	}{
		{"missing cert", missing, certs.Path("tls.key"), certs.Path("ca.crt"), "CONFIG_GRPC_XDS_CLIENT_TLS_CERT:"},
		{"key not a key", certs.Path("tls.crt"), certs.Path("ca.crt"), certs.Path("ca.crt"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY:"},
		{"missing CA", certs.Path("tls.crt"), certs.Path("tls.key"), missing, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT:"},
		{"cert without key", certs.Path("tls.crt"), "", "", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY"},
	} {
		if _, err := xdsClientCredentials(tc.cert, tc.key, tc.ca, "", zap.NewNop()); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: xdsClientCredentials = %v, want an error starting %q", tc.name, err, tc.want)
		}
	}
}
