// Package tlstest makes throwaway certificate authorities and certificates
// for tests, in process, and writes them the way the kubelet mounts a
// Secret: every file behind a ..data symlink that a rotation swaps at once.
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CA is a certificate authority that exists only for one test.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // Cert, PEM-encoded: the contents of a CA file
	key  crypto.Signer
}

// Leaf is a certificate a CA issued, with its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte // the certificate, PEM-encoded
	KeyPEM  []byte // its private key, PKCS#8 in PEM
}

// NewCA returns a new self-signed CA named name, valid for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatalf("tlstest: CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlstest: CA: %v", err)
	}
	return &CA{Cert: cert, PEM: pemBlock("CERTIFICATE", der), key: key}
}

// Issue returns a new certificate for names, each a DNS name or an IP
// address, valid for a day. Like the certificates Envoy Gateway generates,
// it names no extended key usage, so it serves as a server's and as a
// client's.
func (ca *CA) Issue(tb testing.TB, names ...string) *Leaf {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: "tlstest"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		tb.Fatalf("tlstest: issue %v: %v", names, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlstest: issue %v: %v", names, err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("tlstest: issue %v: %v", names, err)
	}
	return &Leaf{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", pk)}
}

// Files are a Secret's files as Envoy Gateway and cert-manager name them:
// tls.crt and tls.key from leaf, ca.crt from ca.
func Files(ca *CA, leaf *Leaf) map[string][]byte {
	return map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.PEM}
}

// Mount is a directory laid out as the kubelet lays out a Secret or
// ConfigMap volume: each file NAME is a symlink to ..data/NAME, and ..data
// a symlink to a directory holding one version of every file. Write
// replaces ..data in one rename, so a reader sees all the old files or all
// the new ones. Safe for concurrent use.
type Mount struct {
	Dir string
	mu  sync.Mutex
	n   int
}

// NewMount returns an empty Mount in a new temporary directory of tb's.
func NewMount(tb testing.TB) *Mount {
	tb.Helper()
	return &Mount{Dir: tb.TempDir()}
}

// Path is where the file name appears.
func (m *Mount) Path(name string) string { return filepath.Join(m.Dir, name) }

// Write makes files (name to contents) the mount's files, all at once, and
// removes the previous version.
func (m *Mount) Write(tb testing.TB, files map[string][]byte) {
	tb.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	version := fmt.Sprintf("..v%d", m.n)
	if err := os.Mkdir(filepath.Join(m.Dir, version), 0o755); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(m.Dir, version, name), data, 0o600); err != nil {
			tb.Fatalf("tlstest: %v", err)
		}
	}
	tmp := filepath.Join(m.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	if err := os.Rename(tmp, filepath.Join(m.Dir, "..data")); err != nil {
		tb.Fatalf("tlstest: %v", err)
	}
	for name := range files {
		link := filepath.Join(m.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			tb.Fatalf("tlstest: %v", err)
		}
	}
	if m.n > 1 {
		if err := os.RemoveAll(filepath.Join(m.Dir, fmt.Sprintf("..v%d", m.n-1))); err != nil {
			tb.Fatalf("tlstest: %v", err)
		}
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("tlstest: key: %v", err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		tb.Fatalf("tlstest: serial: %v", err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
