package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// FileError is a file that cannot be used, reported by Server and Client.
type FileError struct {
	Role string // "cert", "key" or "ca": which of the options named Path
	Path string
	Err  error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("tlsconfig: %s file %q: %v", e.Role, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// material is one load of the files.
type material struct {
	cert *tls.Certificate // nil without a cert file
	pool *x509.CertPool   // nil without a CA file
	// config is what the side (server or client) built from cert and
	// pool, for the handshakes until the next load.
	config any
}

// source loads a certificate, its key and a CA file, and loads them
// again when a handshake finds one changed.
type source struct {
	cert, key, ca string // "" when not used; cert and key go together
	log           *zap.Logger
	build         func(*material) (any, error)

	// last is read by every handshake without a lock; mu serializes the
	// loads that replace it.
	last atomic.Pointer[loaded]
	mu   sync.Mutex
}

// loaded is the outcome of the last load tried.
type loaded struct {
	tried [3]os.FileInfo // of cert, key and ca at the last load tried; nil if missing
	good  *material
}

// newSource loads the files once: an error here is the caller's to
// report, since nothing good was loaded yet.
func newSource(cert, key, ca string, log *zap.Logger, build func(*material) (any, error)) (*source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &source{cert: cert, key: key, ca: ca, log: log, build: build}
	st := s.stat()
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.last.Store(&loaded{tried: st, good: m})
	s.logLoad(m, "tls: loaded certificates")
	return s, nil
}

// current returns the last good material, after loading the files again
// if one of them changed since the last load tried. Safe for concurrent
// use: handshakes stat the files concurrently and take the lock only
// when they changed.
func (s *source) current() *material {
	st := s.stat()
	if l := s.last.Load(); same(st, l.tried) {
		return l.good
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.last.Load()
	if same(st, l.tried) { // another handshake loaded this change
		return l.good
	}
	m, err := s.load()
	if err != nil {
		s.last.Store(&loaded{tried: st, good: l.good})
		s.log.Error("tls: a changed certificate file cannot be used; the last good certificates are kept", zap.Error(err))
		return l.good
	}
	s.last.Store(&loaded{tried: st, good: m})
	s.logLoad(m, "tls: reloaded certificates")
	return m
}

func (s *source) stat() [3]os.FileInfo {
	var st [3]os.FileInfo
	for i, p := range []string{s.cert, s.key, s.ca} {
		if p != "" {
			st[i], _ = os.Stat(p) // follows the ..data symlink
		}
	}
	return st
}

// same reports whether a and b are the same files, unchanged: a rotation
// either replaces a file (another inode, as a ..data swap does) or
// rewrites it (another modification time or size).
func same(a, b [3]os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size():
			return false
		}
	}
	return true
}

func (s *source) load() (*material, error) {
	m := &material{}
	if s.cert != "" {
		cert, err := loadKeyPair(s.cert, s.key)
		if err != nil {
			return nil, err
		}
		m.cert = cert
	}
	if s.ca != "" {
		data, err := os.ReadFile(s.ca)
		if err != nil {
			return nil, &FileError{Role: "ca", Path: s.ca, Err: err}
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(data) {
			return nil, &FileError{Role: "ca", Path: s.ca, Err: errors.New("no PEM certificate in it")}
		}
	}
	var err error
	m.config, err = s.build(m)
	return m, err
}

// loadKeyPair reads a certificate chain and its key, with errors that say
// which file is at fault.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &FileError{Role: "cert", Path: certFile, Err: err}
	}
	if err := checkChain(certPEM); err != nil {
		return nil, &FileError{Role: "cert", Path: certFile, Err: err}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &FileError{Role: "key", Path: keyFile, Err: err}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Role: "key", Path: keyFile, Err: fmt.Errorf("with certificate %s: %w", certFile, err)}
	}
	return &pair, nil
}

// checkChain reports a file with no certificate, or one that does not
// parse.
func checkChain(data []byte) error {
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate in it")
	}
	return nil
}

func (s *source) logLoad(m *material, msg string) {
	fields := []zap.Field{zap.String("cert", s.cert), zap.String("ca", s.ca)}
	if m.cert == nil || m.cert.Leaf == nil {
		s.log.Info(msg, fields...)
		return
	}
	leaf := m.cert.Leaf
	s.log.Info(msg, append(fields,
		zap.String("serial", hex.EncodeToString(leaf.SerialNumber.Bytes())),
		zap.Strings("dns_names", leaf.DNSNames),
		zap.Time("not_after", leaf.NotAfter))...)
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		s.log.Warn("tls: the certificate is not valid now; peers will refuse it", zap.String("cert", s.cert),
			zap.Time("not_before", leaf.NotBefore), zap.Time("not_after", leaf.NotAfter))
	}
}
