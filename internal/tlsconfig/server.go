package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// ServerOptions are the files of a TLS server.
type ServerOptions struct {
	// CertFile is the server's certificate chain, PEM, leaf first, and
	// KeyFile its private key. Both are required.
	CertFile, KeyFile string
	// ClientCAFile holds the PEM certificates of the CAs that sign client
	// certificates. With it, every client must present a certificate one
	// of them signed; without it, none is asked for.
	ClientCAFile string
	// ClientSAN, if set, must be a DNS name (or IP address) of the
	// client's certificate, wildcards matching as in a server name check.
	// It needs ClientCAFile.
	ClientSAN string
	// Logger gets a line for each load of the files, and the errors of
	// rotated files that cannot be used. Default: no logging.
	Logger *zap.Logger
}

// Server loads o's files and returns the configuration of a TLS server
// that serves the latest of them: each handshake checks whether the files
// changed (see the package doc). Errors are *FileError, or name the option
// at fault. The returned config is safe for concurrent use; for gRPC, pass
// it to credentials.NewTLS.
func Server(o ServerOptions) (*tls.Config, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("tlsconfig: a server needs CertFile and KeyFile")
	}
	if o.ClientSAN != "" && o.ClientCAFile == "" {
		return nil, errors.New("tlsconfig: ClientSAN needs ClientCAFile: without it no client certificate is asked for")
	}
	src, err := newSource(o.CertFile, o.KeyFile, o.ClientCAFile, o.Logger, func(m *material) (any, error) {
		return serverConfig(m, o.ClientSAN), nil
	})
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return src.current().config.(*tls.Config), nil
		},
	}, nil
}

// serverConfig is the configuration of the handshakes until the next load.
func serverConfig(m *material, san string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert}}
	if m.pool != nil {
		cfg.ClientCAs = m.pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if san != "" {
		cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			// crypto/tls has verified the chains against ClientCAs.
			if len(chains) == 0 || len(chains[0]) == 0 {
				return errors.New("tlsconfig: no verified client certificate")
			}
			if err := chains[0][0].VerifyHostname(san); err != nil {
				return fmt.Errorf("tlsconfig: client certificate: %w", err)
			}
			return nil
		}
	}
	return cfg
}
