package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// validate is the "validate" subcommand: it loads rules, prints every problem
// with file and line, and fails when there is one.
func validate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", getenv(config.EnvName("config")), "rules file or directory to check")
	merge := fs.Bool("merge-domains", getenv(config.EnvName("merge-domains")) == "true" || getenv("MERGE_DOMAIN_CONFIG") == "true",
		"merge files of the same domain, as the server's -merge-domains (MERGE_DOMAIN_CONFIG)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("validate: -config is required")
	}
	set, err := rules.Options{MergeDomains: *merge}.Load(*path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ok: %d domain(s) %s from %d file(s)\n", len(set.Domains()), strings.Join(set.Domains(), ", "), len(set.Files()))
	return nil
}
