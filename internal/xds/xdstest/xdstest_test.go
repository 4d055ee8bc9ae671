package xdstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
)

// fetch opens an ADS stream to s with cfg and returns the first response's
// version.
func fetch(t *testing.T, s *Server, cfg *tls.Config) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return "", err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resourcev3.RateLimitConfigType}); err != nil {
		return "", err
	}
	resp, err := stream.Recv()
	if err != nil {
		return "", err
	}
	return resp.GetVersionInfo(), nil
}

// TestStartTLS: the server answers a client whose certificate the client
// CA issued, records its serial, and refuses one without a certificate.
func TestStartTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	s := StartTLS(t, "n", ca.Issue(t, "127.0.0.1"), ca)
	v := s.Push(EnvoyGatewayConfig("l", 1, rlsconfv3.RateLimitUnit_MINUTE))
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := ca.Issue(t, "client")
	kp, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fetch(t, s, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{kp}})
	if err != nil || got != v {
		t.Fatalf("fetch with a client certificate = %q, %v; want version %s", got, err, v)
	}
	if ss := s.ClientSerials(); len(ss) != 1 || ss[0].Cmp(client.Cert.SerialNumber) != 0 {
		t.Errorf("ClientSerials = %v, want [%x]", ss, client.Cert.SerialNumber)
	}
	if _, err := fetch(t, s, &tls.Config{RootCAs: roots}); err == nil {
		t.Error("fetch without a client certificate: answered, want refused")
	}
}
