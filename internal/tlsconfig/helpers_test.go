package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
)

// serveHealth serves gRPC health on a loopback port with creds until the
// test ends, and returns the address.
func serveHealth(t *testing.T, creds credentials.TransportCredentials) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// check calls health on a new connection to addr and returns the serial
// of the server's certificate.
func check(t *testing.T, addr string, creds credentials.TransportCredentials) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return call(conn)
}

func call(conn *grpc.ClientConn) (*big.Int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, errors.New("not TLS")
	}
	return info.State.PeerCertificates[0].SerialNumber, nil
}

// staticClient is a client that trusts ca and presents leaf (if not nil),
// loaded once.
func staticClient(t *testing.T, ca *tlstest.CA, leaf *tlstest.Leaf) credentials.TransportCredentials {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: pool}
	if leaf != nil {
		pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg)
}

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return zap.New(core), logs
}

func mountServer(t *testing.T, m *tlstest.Mount, san string, log *zap.Logger) string {
	t.Helper()
	cfg, err := Server(ServerOptions{
		CertFile: m.Path("tls.crt"), KeyFile: m.Path("tls.key"), ClientCAFile: m.Path("ca.crt"),
		ClientSAN: san, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return serveHealth(t, credentials.NewTLS(cfg))
}

func wantSerial(t *testing.T, what string, got *big.Int, err error, want *x509.Certificate) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v, want serial %x", what, err, want.SerialNumber)
	}
	if got.Cmp(want.SerialNumber) != 0 {
		t.Fatalf("%s: serial %x, want %x", what, got, want.SerialNumber)
	}
}
