package tlsconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
)

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
