package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// config is the process configuration: flags, each with an RLS_ variable.
type config struct {
	configPath      string
	grpcAddr        string
	httpAddr        string
	redisURL        string
	redisTimeout    time.Duration
	redis           redisConfig // topology, credentials, TLS, breaker: see redis.go
	keyPrefix       string
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	healthInterval  time.Duration
	clockSync       time.Duration // 0: windows follow the local clock
	overLimitCache  bool
	debugAddr       string
	limits          envoyrls.InputLimits
	// redisGiven names the -redis-* flags given a value other than "",
	// on the command line or by their RLS_ variable; see usesRedis.
	redisGiven []string
}

// envName is the environment variable of a flag: RLS_ and the flag in upper
// snake case ("redis-url" -> "RLS_REDIS_URL").
func envName(flagName string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseFlags(name string, args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.configPath, "config", "", "rules file, or directory of *.yaml/*.yml rule files (required)")
	fs.StringVar(&c.grpcAddr, "grpc-addr", ":8081", "gRPC listen address for ratelimit.v3 and grpc.health.v1: host:port or unix:///path")
	fs.StringVar(&c.httpAddr, "http-addr", ":8082", "HTTP listen address for /healthz, /readyz, /rules and /metrics; empty disables")
	fs.StringVar(&c.redisURL, "redis-url", "", "redis://[user:password@]host:port/db or rediss://...; empty uses the in-memory store (one replica only)")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", 15*time.Millisecond, "bound on each Redis counting call, or nine tenths of the time left to the request's deadline when that is sooner; keep it below Envoy's filter timeout (20ms by default); health pings and the in-memory store are not bound by it")
	c.redis.addFlags(fs)
	fs.StringVar(&c.keyPrefix, "key-prefix", "ratelimit", "first part of every counter key")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight calls may take to finish after SIGTERM")
	fs.DurationVar(&c.healthInterval, "health-interval", time.Second, "how often the store is pinged for readiness")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6060); empty disables; never expose it")
	fs.BoolVar(&c.overLimitCache, "over-limit-cache", true, "with Redis: deny locally, until its window ends, a fixed-window counter known to be full (no Redis traffic for a key under attack)")
	fs.DurationVar(&c.clockSync, "clock-sync-interval", 30*time.Second, "how often the offset to the Redis server's clock (TIME) is measured, so replicas agree on windows; 0 uses the local clock")
	fs.IntVar(&c.limits.MaxDescriptors, "max-descriptors", 64, "most descriptors in one request")
	fs.IntVar(&c.limits.MaxEntries, "max-entries", 32, "most entries in one descriptor")
	fs.IntVar(&c.limits.MaxEntryBytes, "max-entry-bytes", 1024, "longest descriptor key, value or domain, in bytes")
	fs.Uint64Var(&c.limits.MaxHits, "max-hits", 1<<32-1, "largest hits_addend of one descriptor")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{} // on the command line or in the environment
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return // the flag wins over the environment
		}
		if v := getenv(envName(f.Name)); v != "" {
			set[f.Name] = true
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] && strings.HasPrefix(f.Name, "redis-") && f.Value.String() != "" {
			c.redisGiven = append(c.redisGiven, "-"+f.Name)
		}
	})
	if c.clockSync < 0 {
		errs = append(errs, fmt.Errorf("-clock-sync-interval %v: want >= 0", c.clockSync))
	}
	if c.configPath == "" {
		errs = append(errs, errors.New("-config (or RLS_CONFIG) is required"))
	}
	return c, errors.Join(errs...)
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var e zapcore.Encoder
	switch format {
	case "json":
		e = zapcore.NewJSONEncoder(enc)
	case "console":
		e = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("-log-format %q: want json or console", format)
	}
	return zap.New(zapcore.NewCore(e, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// validate is the "validate" subcommand: it loads rules, prints every problem
// with file and line, and fails when there is one.
func validate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", getenv(envName("config")), "rules file or directory to check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("validate: -config is required")
	}
	set, err := rules.Load(*path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ok: %d domain(s) %s from %d file(s)\n", len(set.Domains()), strings.Join(set.Domains(), ", "), len(set.Files()))
	return nil
}
