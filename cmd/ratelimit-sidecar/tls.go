package main

import (
	"errors"
	"flag"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tlsconfig"
)

// grpcTLSConfig is the gRPC server's TLS: the -grpc-tls* flags.
type grpcTLSConfig struct {
	on        bool
	cert      string
	key       string
	clientCA  string
	clientSAN string
}

// grpcTLSSettings names each file's settings in errors, by the
// tlsconfig.FileError role.
var grpcTLSSettings = map[string]string{
	"cert": "-grpc-tls-cert (RLS_GRPC_TLS_CERT, GRPC_SERVER_TLS_CERT)",
	"key":  "-grpc-tls-key (RLS_GRPC_TLS_KEY, GRPC_SERVER_TLS_KEY)",
	"ca":   "-grpc-tls-client-ca (RLS_GRPC_TLS_CLIENT_CA, GRPC_CLIENT_TLS_CACERT, GRPC_SERVER_TLS_CA_CERT)",
}

// addFlags registers the flags on fs; parseOptions gives each its RLS_
// environment variable.
func (c *grpcTLSConfig) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "grpc-tls", false, "serve gRPC with TLS only, never plaintext; needs -grpc-tls-cert and -grpc-tls-key; implied by any -grpc-tls-* file")
	fs.StringVar(&c.cert, "grpc-tls-cert", "", "PEM certificate chain of the gRPC server; loaded again when the file changes")
	fs.StringVar(&c.key, "grpc-tls-key", "", "PEM private key of -grpc-tls-cert")
	fs.StringVar(&c.clientCA, "grpc-tls-client-ca", "", "PEM CA certificates: every gRPC client must present a certificate one of them signed (mutual TLS); empty asks clients for none")
	fs.StringVar(&c.clientSAN, "grpc-tls-client-san", "", "a DNS name (or IP) the client certificate must have; needs -grpc-tls-client-ca")
}

// enabled reports whether TLS was asked for, by -grpc-tls or any file.
func (c *grpcTLSConfig) enabled() bool {
	return c.on || c.cert != "" || c.key != "" || c.clientCA != "" || c.clientSAN != ""
}

// check reports settings that cannot serve TLS as they ask; they stop the
// start, since serving plaintext instead would be worse.
func (c *grpcTLSConfig) check() []error {
	if !c.enabled() {
		return nil
	}
	var errs []error
	if c.cert == "" || c.key == "" {
		errs = append(errs, errors.New("gRPC TLS (-grpc-tls, GRPC_SERVER_USE_TLS=true or a -grpc-tls-* file) needs -grpc-tls-cert and -grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)"))
	}
	if c.clientSAN != "" && c.clientCA == "" {
		errs = append(errs, errors.New("-grpc-tls-client-san (GRPC_CLIENT_TLS_SAN) needs -grpc-tls-client-ca (GRPC_CLIENT_TLS_CACERT or GRPC_SERVER_TLS_CA_CERT): without it no client certificate is asked for"))
	}
	return errs
}

// serverOption loads the files and returns the gRPC server's TLS
// credentials, nil without TLS. A file that cannot be used is an error
// naming its settings.
func (c *grpcTLSConfig) serverOption(log *zap.Logger) (grpc.ServerOption, error) {
	if !c.enabled() {
		return nil, nil
	}
	cfg, err := tlsconfig.Server(tlsconfig.ServerOptions{
		CertFile:     c.cert,
		KeyFile:      c.key,
		ClientCAFile: c.clientCA,
		ClientSAN:    c.clientSAN,
		Logger:       log.With(zap.String("tls", "grpc-server")),
	})
	if err != nil {
		return nil, nameFileError(err, grpcTLSSettings)
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// nameFileError puts the settings that name a tlsconfig.FileError's file
// (settings, by its role) in front of err; other errors are returned as
// they are.
func nameFileError(err error, settings map[string]string) error {
	var fe *tlsconfig.FileError
	if errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", settings[fe.Role], err)
	}
	return err
}

// xdsTLSSettings names the xDS client's files in errors, by the
// tlsconfig.FileError role.
var xdsTLSSettings = map[string]string{
	"cert": "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"key":  "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
	"ca":   "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
}

// xdsClientCredentials loads the xDS client's files and returns its
// transport credentials for CONFIG_GRPC_XDS_SERVER_USE_TLS=true: the
// server's certificate verified against ca (the system's roots when "")
// and for san (the dial target's host when ""), the client certificate
// cert and key (both, or neither) presented; all reloaded when the files
// change. A file that cannot be used is an error naming its variable.
func xdsClientCredentials(cert, key, ca, san string, log *zap.Logger) (credentials.TransportCredentials, error) {
	if (cert == "") != (key == "") {
		return nil, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both, or neither")
	}
	creds, err := tlsconfig.Client(tlsconfig.ClientOptions{
		CertFile:   cert,
		KeyFile:    key,
		CAFile:     ca,
		ServerName: san,
		Logger:     log.With(zap.String("tls", "xds-client")),
	})
	if err != nil {
		return nil, nameFileError(err, xdsTLSSettings)
	}
	return creds, nil
}
