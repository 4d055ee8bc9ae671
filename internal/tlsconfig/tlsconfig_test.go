package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tlstest"
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

func TestServerRotates(t *testing.T) {
	t.Parallel()
	ca1 := tlstest.NewCA(t, "ca1")
	a, b := ca1.Issue(t, "localhost", "127.0.0.1"), ca1.Issue(t, "localhost", "127.0.0.1")
	m := tlstest.NewMount(t)
	m.Write(t, tlstest.Files(ca1, a))
	log, logs := observed()
	addr := mountServer(t, m, "", log)
	client1 := staticClient(t, ca1, ca1.Issue(t, "envoy"))

	got, err := check(t, addr, client1)
	wantSerial(t, "cert A", got, err, a.Cert)
	// A connection made before the rotation keeps working after it.
	old, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(client1))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	got, err = call(old)
	wantSerial(t, "cert A, kept connection", got, err, a.Cert)

	m.Write(t, tlstest.Files(ca1, b))
	got, err = check(t, addr, client1)
	wantSerial(t, "cert B, same CA", got, err, b.Cert)
	got, err = call(old)
	wantSerial(t, "cert A on the connection made before", got, err, a.Cert)

	// A new CA: the server's certificate and the clients it accepts.
	ca2 := tlstest.NewCA(t, "ca2")
	c := ca2.Issue(t, "localhost", "127.0.0.1")
	m.Write(t, tlstest.Files(ca2, c))
	got, err = check(t, addr, staticClient(t, ca2, ca2.Issue(t, "envoy")))
	wantSerial(t, "cert C, new CA", got, err, c.Cert)
	if _, err := check(t, addr, staticClient(t, ca2, ca1.Issue(t, "envoy"))); err == nil {
		t.Error("client certificate of the old CA after the CA rotated: accepted, want refused")
	}

	if n := logs.FilterMessage("tls: reloaded certificates").Len(); n != 2 {
		t.Errorf("%d reload log lines, want 2: %v", n, logs.All())
	}
}

func TestServerRefuses(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	m := tlstest.NewMount(t)
	m.Write(t, tlstest.Files(ca, ca.Issue(t, "127.0.0.1")))
	addr := mountServer(t, m, "", nil)
	sanAddr := mountServer(t, m, "envoy.envoy-gateway-system", nil)

	for _, tc := range []struct {
		name  string
		addr  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"client certificate of the CA", addr, staticClient(t, ca, ca.Issue(t, "envoy")), true},
		{"no client certificate", addr, staticClient(t, ca, nil), false},
		{"client certificate of another CA", addr, staticClient(t, ca, other.Issue(t, "envoy")), false},
		{"plaintext", addr, insecure.NewCredentials(), false},
		{"SAN by wildcard", sanAddr, staticClient(t, ca, ca.Issue(t, "*.envoy-gateway-system")), true},
		{"SAN exact", sanAddr, staticClient(t, ca, ca.Issue(t, "x", "envoy.envoy-gateway-system")), true},
		{"another SAN", sanAddr, staticClient(t, ca, ca.Issue(t, "envoy.default")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := check(t, tc.addr, tc.creds)
			if (err == nil) != tc.ok {
				t.Errorf("check = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestServerKeepsLastGood rewrites the files in place, one at a time, as a
// careless rotation would.
func TestServerKeepsLastGood(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	a, b := ca.Issue(t, "127.0.0.1"), ca.Issue(t, "127.0.0.1")
	dir := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range tlstest.Files(ca, a) {
		write(name, data)
	}
	log, logs := observed()
	cfg, err := Server(ServerOptions{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveHealth(t, credentials.NewTLS(cfg))
	client := staticClient(t, ca, ca.Issue(t, "envoy"))

	write("tls.crt", b.CertPEM) // the key is still A's
	for i := range 2 {
		got, err := check(t, addr, client)
		wantSerial(t, fmt.Sprintf("cert B with key A, handshake %d", i+1), got, err, a.Cert)
	}
	const bad = "tls: a changed certificate file cannot be used; the last good certificates are kept"
	if n := logs.FilterMessage(bad).Len(); n != 1 {
		t.Errorf("%d error lines for one bad change, want 1: %v", n, logs.All())
	}
	write("tls.key", b.KeyPEM)
	got, err := check(t, addr, client)
	wantSerial(t, "cert B with key B", got, err, b.Cert)

	write("ca.crt", []byte("not PEM"))
	got, err = check(t, addr, client)
	wantSerial(t, "cert B with a bad CA file", got, err, b.Cert)
	if n := logs.FilterMessage(bad).Len(); n != 2 {
		t.Errorf("%d error lines after a bad CA file, want 2", n)
	}
}

func TestServerErrors(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	a, b := ca.Issue(t, "a"), ca.Issue(t, "b")
	dir := t.TempDir()
	files := map[string][]byte{"a.crt": a.CertPEM, "a.key": a.KeyPEM, "b.key": b.KeyPEM, "ca.crt": ca.PEM, "junk": []byte("junk")}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	for _, tc := range []struct {
		name string
		o    ServerOptions
		role string // of the *FileError; "" for another error
	}{
		{"no cert", ServerOptions{KeyFile: p("a.key")}, ""},
		{"no key", ServerOptions{CertFile: p("a.crt")}, ""},
		{"SAN without CA", ServerOptions{CertFile: p("a.crt"), KeyFile: p("a.key"), ClientSAN: "x"}, ""},
		{"missing cert", ServerOptions{CertFile: p("nope"), KeyFile: p("a.key")}, "cert"},
		{"junk cert", ServerOptions{CertFile: p("junk"), KeyFile: p("a.key")}, "cert"},
		{"missing key", ServerOptions{CertFile: p("a.crt"), KeyFile: p("nope")}, "key"},
		{"key of another cert", ServerOptions{CertFile: p("a.crt"), KeyFile: p("b.key")}, "key"},
		{"missing CA", ServerOptions{CertFile: p("a.crt"), KeyFile: p("a.key"), ClientCAFile: p("nope")}, "ca"},
		{"junk CA", ServerOptions{CertFile: p("a.crt"), KeyFile: p("a.key"), ClientCAFile: p("junk")}, "ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Server(tc.o)
			var fe *FileError
			switch {
			case err == nil:
				t.Fatal("Server = nil error, want one")
			case tc.role == "" && errors.As(err, &fe):
				t.Errorf("Server = %v, want an error about the options", err)
			case tc.role != "" && (!errors.As(err, &fe) || fe.Role != tc.role):
				t.Errorf("Server = %v, want a *FileError of role %s", err, tc.role)
			}
		})
	}
	if _, err := Server(ServerOptions{CertFile: p("a.crt"), KeyFile: p("a.key"), ClientCAFile: p("ca.crt")}); err != nil {
		t.Errorf("Server(good files) = %v", err)
	}
}

// TestClient runs the xDS client's credentials against a server with mutual
// TLS whose certificate names only the xDS server's DNS name.
func TestClient(t *testing.T) {
	t.Parallel()
	ca1 := tlstest.NewCA(t, "ca1")
	srv := tlstest.NewMount(t)
	srv.Write(t, tlstest.Files(ca1, ca1.Issue(t, "envoy-gateway", "envoy-gateway.envoy-gateway-system")))
	serverCfg, err := Server(ServerOptions{CertFile: srv.Path("tls.crt"), KeyFile: srv.Path("tls.key"), ClientCAFile: srv.Path("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	var clientSerial atomic.Pointer[big.Int] // of the last client certificate the server saw
	getConfig := serverCfg.GetConfigForClient
	serverCfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg, err := getConfig(hello)
		if err != nil {
			return nil, err
		}
		cfg = cfg.Clone()
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			clientSerial.Store(cs.PeerCertificates[0].SerialNumber)
			return nil
		}
		return cfg, nil
	}
	addr := serveHealth(t, credentials.NewTLS(serverCfg))

	cli := tlstest.NewMount(t)
	x := ca1.Issue(t, "envoy-rate-limit")
	cli.Write(t, tlstest.Files(ca1, x))
	log, logs := observed()
	opts := ClientOptions{CertFile: cli.Path("tls.crt"), KeyFile: cli.Path("tls.key"), CAFile: cli.Path("ca.crt"),
		ServerName: "envoy-gateway", Logger: log}
	creds, err := Client(opts)
	if err != nil {
		t.Fatal(err)
	}
	checkClient := func(what string, want *x509.Certificate) {
		t.Helper()
		if _, err := check(t, addr, creds); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := clientSerial.Load(); got.Cmp(want.SerialNumber) != 0 {
			t.Fatalf("%s: the server saw client serial %x, want %x", what, got, want.SerialNumber)
		}
	}
	checkClient("client cert X", x.Cert)

	y := ca1.Issue(t, "envoy-rate-limit")
	cli.Write(t, tlstest.Files(ca1, y))
	checkClient("client cert Y, same CA", y.Cert)

	// Both sides move to a new CA.
	ca2 := tlstest.NewCA(t, "ca2")
	srv.Write(t, tlstest.Files(ca2, ca2.Issue(t, "envoy-gateway")))
	if _, err := check(t, addr, creds); err == nil {
		t.Fatal("server certificate of a CA the client does not trust: accepted")
	}
	z := ca2.Issue(t, "envoy-rate-limit")
	cli.Write(t, tlstest.Files(ca2, z))
	checkClient("client cert Z, new CA", z.Cert)
	if n := logs.FilterMessage("tls: reloaded certificates").Len(); n != 2 {
		t.Errorf("%d reload log lines, want 2", n)
	}

	for _, tc := range []struct {
		name string
		o    ClientOptions
	}{
		// The dial target's host, 127.0.0.1, is not in the server's
		// certificate.
		{"no ServerName", ClientOptions{CertFile: opts.CertFile, KeyFile: opts.KeyFile, CAFile: opts.CAFile}},
		{"another ServerName", ClientOptions{CertFile: opts.CertFile, KeyFile: opts.KeyFile, CAFile: opts.CAFile, ServerName: "xds.example"}},
		{"no client certificate", ClientOptions{CAFile: opts.CAFile, ServerName: "envoy-gateway"}},
		{"system roots", ClientOptions{CertFile: opts.CertFile, KeyFile: opts.KeyFile, ServerName: "envoy-gateway"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds, err := Client(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := check(t, addr, creds); err == nil {
				t.Error("check = nil error, want refused")
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    ClientOptions
		role string
	}{
		{"cert without key", ClientOptions{CertFile: junk}, ""},
		{"key without cert", ClientOptions{KeyFile: junk}, ""},
		{"junk cert", ClientOptions{CertFile: junk, KeyFile: junk}, "cert"},
		{"junk CA", ClientOptions{CAFile: junk}, "ca"},
		{"missing CA", ClientOptions{CAFile: filepath.Join(dir, "nope")}, "ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Client(tc.o)
			var fe *FileError
			switch {
			case err == nil:
				t.Fatal("Client = nil error, want one")
			case tc.role == "" && errors.As(err, &fe):
				t.Errorf("Client = %v, want an error about the options", err)
			case tc.role != "" && (!errors.As(err, &fe) || fe.Role != tc.role):
				t.Errorf("Client = %v, want a *FileError of role %s", err, tc.role)
			}
		})
	}
	if _, err := Client(ClientOptions{}); err != nil {
		t.Errorf("Client(system roots, no certificate) = %v", err)
	}
}
