package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// ClientOptions are the files of a TLS client.
type ClientOptions struct {
	// CertFile is the client's certificate chain, PEM, leaf first, and
	// KeyFile its private key: both, presented to servers that ask, or
	// neither.
	CertFile, KeyFile string
	// CAFile holds the PEM certificates of the CAs that sign the server's
	// certificate. Default: the system's roots.
	CAFile string
	// ServerName, if set, is the name the server's certificate must have,
	// and the name sent in SNI; default: the host of the dial target.
	ServerName string
	// Logger gets a line for each load of the files, and the errors of
	// rotated files that cannot be used. Default: no logging.
	Logger *zap.Logger
}

// Client loads o's files and returns the transport credentials of a gRPC
// client (grpc.WithTransportCredentials) that verifies the server's
// certificate and presents its own, from the latest files: each handshake
// checks whether they changed (see the package doc). Errors are
// *FileError, or name the option at fault. The credentials are safe for
// concurrent use.
func Client(o ClientOptions) (credentials.TransportCredentials, error) {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("tlsconfig: a client needs both CertFile and KeyFile, or neither")
	}
	src, err := newSource(o.CertFile, o.KeyFile, o.CAFile, o.Logger, func(m *material) (any, error) {
		return credentials.NewTLS(clientConfig(m)), nil
	})
	if err != nil {
		return nil, err
	}
	return &clientCreds{src: src, serverName: o.ServerName}, nil
}

// clientConfig is the configuration of the handshakes until the next
// load.
func clientConfig(m *material) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.pool}
	if cert := m.cert; cert != nil {
		// Presented whatever CAs the server says it accepts, so that a
		// refusal shows in the server's log rather than as a missing
		// certificate.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// clientCreds hands each handshake to the TLS credentials of the latest
// files.
type clientCreds struct {
	src        *source
	serverName string // ClientOptions.ServerName
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c.serverName != "" {
		// gRPC's TLS credentials take the name to verify from the
		// authority; the :authority header keeps the dial target's.
		authority = c.serverName
	}
	return c.src.current().config.(credentials.TransportCredentials).ClientHandshake(ctx, authority, conn)
}

func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconfig: client credentials cannot serve")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	return &clientCreds{src: c.src, serverName: c.serverName}
}

// OverrideServerName is gRPC's deprecated way to set ServerName; the
// option is the way.
func (c *clientCreds) OverrideServerName(string) error {
	return errors.New("tlsconfig: set ClientOptions.ServerName instead")
}
