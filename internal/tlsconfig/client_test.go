package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/credentials"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
)

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
