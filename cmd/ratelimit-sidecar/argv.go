package main

import (
	"flag"
	"path/filepath"
	"strings"
)

// referenceName is the name envoyproxy/ratelimit's image runs,
// /bin/ratelimit. Envoy Gateway and AI Gateway start that path, and the
// reference never parses its command line, so their manifests may pass
// arguments meant for something else (AI Gateway's e2e Deployment passes
// --quotaRateLimitServiceAddr=...). Under that name this binary is a drop-in
// and ignores arguments it does not define (see splitForeign); under any
// other name an unknown flag is an error, as a mistyped flag should be.
const referenceName = "ratelimit"

// startedAsReference reports whether argv0, the name the process was
// started under, is the reference's.
func startedAsReference(argv0 string) bool { return filepath.Base(argv0) == referenceName }

// splitForeign splits args into the flags fs defines, each with its value,
// and everything else: flags fs does not define and positional arguments
// (after "--" too). A flag of fs that takes a value and has no "=" takes
// the next argument as its value, as package flag does.
func splitForeign(fs *flag.FlagSet, args []string) (ours, foreign []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return ours, append(foreign, args[i:]...)
		}
		name, hasValue := flagName(a)
		f := fs.Lookup(name)
		if name == "" || f == nil {
			foreign = append(foreign, a)
			continue
		}
		ours = append(ours, a)
		if !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			ours = append(ours, args[i])
		}
	}
	return ours, foreign
}

// flagName returns the name of a "-name", "--name" or "-name=value"
// argument and whether it carries its value; "" for anything else.
func flagName(a string) (string, bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false
	}
	name := strings.TrimPrefix(a[1:], "-")
	if name == "" || name[0] == '-' || name[0] == '=' {
		return "", false
	}
	name, _, hasValue := strings.Cut(name, "=")
	return name, hasValue
}

// isBoolFlag reports whether f takes no value, as package flag decides.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
