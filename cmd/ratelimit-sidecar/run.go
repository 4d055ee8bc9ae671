package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
)

// run is the command started under its own name: the "validate"
// subcommand, or the service, which serves until ctx ends and then shuts
// down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runAs(ctx, "ratelimit-sidecar", args, getenv, stdout, stderr)
}

// runAs is run started under name (argv[0]), which decides what happens to
// arguments the command does not define (see referenceName).
func runAs(ctx context.Context, name string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "validate" {
		return validate(args[1:], getenv, stdout, stderr)
	}
	o, err := parseOptions(name, args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(o.logLevel, o.logFormat, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()
	if len(o.ignoredArgs) > 0 {
		log.Warn("arguments ignored: started as "+referenceName+", which ignores its command line",
			zap.Strings("args", o.ignoredArgs))
	}
	for _, n := range o.refNotes {
		if n.warn {
			log.Warn(n.name+": "+n.text, zap.String("variable", n.name))
		} else {
			log.Info(n.name+": "+n.text, zap.String("variable", n.name))
		}
	}

	// SIGHUP reloads the rules. Caught from the start: its default action
	// would kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	a, err := newApp(ctx, o, log)
	if err != nil {
		return err
	}
	defer a.close()
	return a.serve(ctx, hup)
}
