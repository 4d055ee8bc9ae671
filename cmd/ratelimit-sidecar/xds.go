package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// Where the rules come from: -config-type.
const (
	configFile = "file"          // -config, reloaded on change
	configXDS  = "grpc-xds-sotw" // an xDS server, state of the world
)

// xdsConfig is -config-type and the xDS client's flags.
type xdsConfig struct {
	configType     string
	serverURL      string
	nodeID         string
	nodeMetadata   string
	headers        string
	tls            bool
	tlsCert        string // client certificate presented to the xDS server
	tlsKey         string
	tlsCA          string // CA the server's certificate must chain to; empty: the system's roots
	tlsSAN         string // name the server's certificate must carry; empty: the -xds-server-url host
	backoffInitial time.Duration
	backoffMax     time.Duration
	backoffRandom  float64
	backoffJitter  bool
	maxMsgSize     int
	forceStart     bool
	domainDefaults string
}

// addFlags registers the flags on fs; parseOptions gives each its RLS_
// environment variable. The defaults are envoyproxy/ratelimit's.
func (c *xdsConfig) addFlags(fs *flag.FlagSet) {
	fs.Func("config-type", "where the rules come from: file (-config) or grpc-xds-sotw (an xDS server, -xds-server-url) (default file)", func(s string) error {
		switch t := strings.ReplaceAll(strings.ToLower(s), "_", "-"); t {
		case configFile, configXDS:
			c.configType = t
			return nil
		}
		return fmt.Errorf("want %s or %s", configFile, configXDS)
	})
	c.configType = configFile
	fs.StringVar(&c.serverURL, "xds-server-url", "localhost:18000", "with -config-type grpc-xds-sotw: the xDS server's gRPC target")
	fs.StringVar(&c.nodeID, "xds-node-id", "default", "the xDS node id, which the server keys its snapshots by")
	fs.StringVar(&c.nodeMetadata, "xds-node-metadata", "", "the xDS node's metadata: key=value,key=value, or a JSON object")
	fs.StringVar(&c.headers, "xds-headers", "", "gRPC metadata sent on the xDS stream: name:value,name:value")
	fs.BoolVar(&c.tls, "xds-tls", false, "connect to the xDS server with TLS (never plaintext when set)")
	fs.StringVar(&c.tlsCert, "xds-tls-cert", "", "with -xds-tls: client certificate file presented to the xDS server (reloaded when it changes)")
	fs.StringVar(&c.tlsKey, "xds-tls-key", "", "with -xds-tls: the client certificate's key file")
	fs.StringVar(&c.tlsCA, "xds-tls-ca", "", "with -xds-tls: CA file the xDS server's certificate must chain to (default: the system's roots)")
	fs.StringVar(&c.tlsSAN, "xds-tls-san", "", "with -xds-tls: name the xDS server's certificate must carry (default: the -xds-server-url host)")
	fs.DurationVar(&c.backoffInitial, "xds-backoff-initial", 10*time.Second, "wait before the first reconnection to the xDS server; doubled on each failure")
	fs.DurationVar(&c.backoffMax, "xds-backoff-max", 60*time.Second, "longest wait between reconnections to the xDS server")
	fs.Float64Var(&c.backoffRandom, "xds-backoff-random-factor", 0.5, "with -xds-backoff-jitter, each wait is spread by up to this fraction of itself")
	fs.BoolVar(&c.backoffJitter, "xds-backoff-jitter", true, "spread the waits between reconnections at random")
	fs.IntVar(&c.maxMsgSize, "xds-max-msg-size", 0, "largest xDS response, in bytes; 0 is gRPC's 4 MiB")
	fs.BoolVar(&c.forceStart, "force-start", false, "with -config-type grpc-xds-sotw: healthy before the first push (every answer OK until rules come); else not ready until the first good push")
	fs.StringVar(&c.domainDefaults, "xds-domain-defaults", "", "YAML file of per-domain settings that xDS cannot carry: failure_mode, algorithm, per-rule unit_multiplier, algorithm and burst (docs/gateway.md)")
}

// check reports bad combinations; configPath is -config.
func (c *xdsConfig) check(configPath string) []error {
	var errs []error
	if c.configType == configFile && configPath == "" {
		errs = append(errs, errors.New("-config (or RLS_CONFIG) is required"))
	}
	if c.configType == configXDS && c.serverURL == "" {
		errs = append(errs, errors.New("-xds-server-url is required with -config-type grpc-xds-sotw"))
	}
	if c.backoffRandom < 0 || c.backoffRandom > 1 {
		errs = append(errs, fmt.Errorf("-xds-backoff-random-factor %v: want from 0 to 1", c.backoffRandom))
	}
	if c.maxMsgSize < 0 {
		errs = append(errs, fmt.Errorf("-xds-max-msg-size %d: want >= 0", c.maxMsgSize))
	}
	return errs
}

// rulesAtStart reports whether rules are there before serving: files load
// first, xDS pushes come later, unless -force-start serves without them.
func (c *xdsConfig) rulesAtStart() bool { return c.configType == configFile || c.forceStart }

// xdsDialOptions returns the dial options of the xDS server's connection:
// its transport credentials, the one place that chooses them. With
// -xds-tls the connection is TLS (the client certificate presented, the
// server's verified, files reloaded when they change) or the start fails:
// a server that expects TLS never gets plaintext.
func xdsDialOptions(c *xdsConfig, log *zap.Logger) ([]grpc.DialOption, error) {
	if !c.tls {
		if c.tlsCert != "" || c.tlsKey != "" || c.tlsCA != "" || c.tlsSAN != "" {
			log.Info("-xds-tls-* set without -xds-tls (CONFIG_GRPC_XDS_SERVER_USE_TLS): connecting to the xDS server in plaintext, as envoyproxy/ratelimit does")
		}
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	creds, err := xdsClientCredentials(c.tlsCert, c.tlsKey, c.tlsCA, c.tlsSAN, log)
	if err != nil {
		return nil, fmt.Errorf("-xds-tls: %w", err)
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(creds)}, nil
}

// newXDSClient builds the xDS client of -config-type grpc-xds-sotw, which
// applies each good push with apply and reports it to onUpdate.
func newXDSClient(o *options, log *zap.Logger, apply func(*rules.Set), onUpdate func(error)) (*xds.Client, error) {
	c := &o.xds
	dial, err := xdsDialOptions(c, log)
	if err != nil {
		return nil, err
	}
	md, ignored, err := xds.ParseNodeMetadata(c.nodeMetadata)
	if err != nil {
		return nil, fmt.Errorf("-xds-node-metadata: %w", err)
	}
	for _, e := range ignored {
		log.Warn("-xds-node-metadata: entry without '=' skipped", zap.String("entry", e))
	}
	headers, err := xds.ParseHeaders(c.headers)
	if err != nil {
		return nil, fmt.Errorf("-xds-headers: %w", err)
	}
	var defaults *xds.Defaults
	if c.domainDefaults != "" {
		if defaults, err = xds.LoadDefaults(c.domainDefaults); err != nil {
			return nil, fmt.Errorf("-xds-domain-defaults: %w", err)
		}
	}
	return xds.New(xds.Options{
		ServerURL:      c.serverURL,
		NodeID:         c.nodeID,
		NodeMetadata:   md,
		Headers:        headers,
		DialOptions:    dial,
		MaxRecvMsgSize: c.maxMsgSize,
		Backoff:        xds.Backoff{Initial: c.backoffInitial, Max: c.backoffMax, RandomFactor: c.backoffRandom, Jitter: c.backoffJitter},
		MergeDomains:   o.mergeDomains,
		Defaults:       defaults,
		Apply:          apply,
		OnUpdate:       onUpdate,
		Logger:         log,
	})
}
