package tlstest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

func TestIssue(t *testing.T) {
	t.Parallel()
	ca := NewCA(t, "ca")
	leaf := ca.Issue(t, "svc.example", "127.0.0.1")
	if _, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM); err != nil {
		t.Fatalf("X509KeyPair = %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.PEM) {
		t.Fatal("CA PEM has no certificate")
	}
	for _, name := range []string{"svc.example", "127.0.0.1"} {
		if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("Verify(%s) = %v", name, err)
		}
	}
	if _, err := ca.Issue(t, "x").Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "svc.example"}); err == nil {
		t.Error("Verify(svc.example) of a certificate for x = nil, want an error")
	}
}

func TestMount(t *testing.T) {
	t.Parallel()
	m := NewMount(t)
	for _, v := range []string{"one", "two"} {
		m.Write(t, map[string][]byte{"a": []byte(v), "b": []byte(v)})
		for _, name := range []string{"a", "b"} {
			got, err := os.ReadFile(m.Path(name))
			if err != nil || !bytes.Equal(got, []byte(v)) {
				t.Errorf("after writing %s: %s = %q, %v", v, name, got, err)
			}
			if target, _ := os.Readlink(m.Path(name)); target != filepath.Join("..data", name) {
				t.Errorf("%s links to %q, want ..data/%s", name, target, name)
			}
		}
	}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 { // a, b, ..data and one version
		t.Errorf("%d entries after two writes, want 4: %v", len(entries), entries)
	}
}
