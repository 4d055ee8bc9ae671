package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// validate is the "validate" subcommand: it loads rules, prints every problem
// with file and line, and fails when there is one. The rules are rules
// files, or RateLimitConfigs as an xDS server sends them, in JSON or YAML
// (-config-format).
func validate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", getenv(config.EnvName("config")), "rules file or directory to check")
	merge := fs.Bool("merge-domains", getenv(config.EnvName("merge-domains")) == "true" || getenv("MERGE_DOMAIN_CONFIG") == "true",
		"merge files of the same domain, as the server's -merge-domains (MERGE_DOMAIN_CONFIG)")
	format := fs.String("config-format", "auto", "file (rules files), xds (RateLimitConfigs in JSON or YAML, *.json, *.yaml, *.yml), or auto: xds for files with a top-level name or @type")
	defaults := fs.String("xds-domain-defaults", getenv(config.EnvName("xds-domain-defaults")), "with xds: the -xds-domain-defaults file to apply")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("validate: -config is required")
	}
	o := rules.Options{MergeDomains: *merge}
	var set *rules.Set
	var err error
	switch *format {
	case "file":
		set, err = o.Load(*path)
	case "xds":
		set, err = validateXDS(o, *path, *defaults)
	case "auto":
		if isProtoForm(*path) {
			set, err = validateXDS(o, *path, *defaults)
		} else {
			set, err = o.Load(*path)
		}
	default:
		return fmt.Errorf("validate: -config-format %q: want file, xds or auto", *format)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ok: %d domain(s) %s from %d file(s)\n", len(set.Domains()), strings.Join(set.Domains(), ", "), len(set.Files()))
	return nil
}

// validateXDS checks RateLimitConfigs in path, a file or a directory of
// *.json, *.yaml and *.yml files, as the xDS client would a push of them,
// with the domain defaults file, if any.
func validateXDS(o rules.Options, path, defaultsPath string) (*rules.Set, error) {
	var defaults *xds.Defaults
	if defaultsPath != "" {
		var err error
		if defaults, err = xds.LoadDefaults(defaultsPath); err != nil {
			return nil, err
		}
	}
	names, err := protoFiles(path)
	if err != nil {
		return nil, &rules.Error{Problems: []rules.Problem{{File: path, Msg: err.Error()}}}
	}
	var files []*rules.File
	var problems []rules.Problem
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			problems = append(problems, rules.Problem{File: name, Msg: err.Error()})
			continue
		}
		f, ps := rules.DecodeProto(name, data)
		problems = append(problems, ps...)
		if f != nil {
			defaults.Apply(f)
			files = append(files, f)
		}
	}
	if len(problems) > 0 {
		return nil, &rules.Error{Problems: problems}
	}
	return o.Compile(files)
}

// protoFiles is path, or the *.json, *.yaml and *.yml files of the
// directory path, hidden ones skipped, in name order.
func protoFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		switch ext := filepath.Ext(e.Name()); {
		case strings.HasPrefix(e.Name(), "."), e.IsDir():
		case ext == ".json", ext == ".yaml", ext == ".yml":
			out = append(out, filepath.Join(path, e.Name()))
		}
	}
	return out, nil
}

// isProtoForm reports whether path holds RateLimitConfigs rather than
// rules files: every file it names has a top-level "name" or "@type",
// which a rules file never has (a directory of none is rules files).
func isProtoForm(path string) bool {
	names, err := protoFiles(path)
	if err != nil || len(names) == 0 {
		return false
	}
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			return false
		}
		var top map[string]any
		if yaml.Unmarshal(data, &top) != nil {
			return false
		}
		_, named := top["name"]
		_, typed := top["@type"]
		if !named && !typed {
			return false
		}
	}
	return true
}
