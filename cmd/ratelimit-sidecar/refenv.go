package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

// envoyproxy/ratelimit is configured by environment variables only, and the
// deployments that run it (its README, Istio's sample, Envoy Gateway) set
// nothing else. refVars maps each of its variables onto this command's
// flags, or says in one log line at start what is used instead. The mapping
// ranks below the flags and their RLS_ variables: a flag given either way
// wins over the reference variables that would set it.

// refVar is one row of the table: variables read together, their
// reference defaults, and what they become.
type refVar struct {
	names []string
	defs  []string // the reference's defaults, by names' index
	// to maps the values (defaults filled in, in names' order) onto flags
	// and notes; a mapper of several variables names each value on its
	// first line and reads only those names. nil for a variable this
	// project replaces, which gets note instead.
	to func(m *refMapping, v []string) error
	// always calls to even when none of names is set.
	always bool
	// note is logged once for each of names that is set, when to is nil.
	note string
}

// refNote is one startup log line about a reference variable.
type refNote struct {
	name string // the variable
	text string
	warn bool // behaviour the deployment may rely on is missing
}

// refMapping collects what the reference's variables ask.
type refMapping struct {
	redis  bool // REDIS_URL or BACKEND_TYPE=redis: counters in Redis
	sets   []refSet
	notes  []refNote
	getenv func(string) string
	exists func(path string) bool
}

// refSet gives flags values from variables, unless one of guard, the
// flags that say the same thing, was given by flag or RLS_ variable.
type refSet struct {
	from  []string
	guard []string
	flags [][2]string // name, value
}

// set gives flag values (name, value pairs in kv) from the variables from,
// unless one of guard (default: the flags set) is given otherwise.
func (m *refMapping) set(from, guard []string, kv ...string) {
	s := refSet{from: from, guard: guard}
	for i := 0; i+1 < len(kv); i += 2 {
		s.flags = append(s.flags, [2]string{kv[i], kv[i+1]})
		if guard == nil {
			s.guard = append(s.guard, kv[i])
		}
	}
	m.sets = append(m.sets, s)
}

func (m *refMapping) note(name, text string, warn bool) {
	m.notes = append(m.notes, refNote{name: name, text: text, warn: warn})
}

// setRedis is set for a variable only the Redis store reads: without
// Redis, it is noted as not used.
func (m *refMapping) setRedis(name string, kv ...string) {
	if !m.redis {
		m.note(name, "not used: without REDIS_URL (or BACKEND_TYPE=redis) the counters are in memory", true)
		return
	}
	m.set([]string{name}, nil, kv...)
}

// referenceEnv reads the reference's variables through getenv, each once,
// and returns what they ask. A malformed value is an error naming its
// variable.
func referenceEnv(getenv func(string) string) (*refMapping, error) {
	return readReferenceEnv(getenv, func(p string) bool { _, err := os.Stat(p); return err == nil })
}

func readReferenceEnv(getenv func(string) string, exists func(string) bool) (*refMapping, error) {
	m := &refMapping{getenv: getenv, exists: exists}
	m.redis = getenv("REDIS_URL") != "" || strings.EqualFold(getenv("BACKEND_TYPE"), "redis")
	var errs []error
	for _, r := range refVars {
		vals := make([]string, len(r.names))
		given := false
		for i, n := range r.names {
			if vals[i] = getenv(n); vals[i] != "" {
				given = true
			} else if i < len(r.defs) {
				vals[i] = r.defs[i]
			}
		}
		if !given && !r.always {
			continue
		}
		if r.to == nil {
			for _, n := range r.names {
				if getenv(n) != "" {
					m.note(n, r.note, false)
				}
			}
			continue
		}
		if err := r.to(m, vals); err != nil {
			errs = append(errs, err)
		}
	}
	return m, errors.Join(errs...)
}

// apply sets the flags the reference's variables ask for, except those
// given otherwise (set), and marks them set. Each flag's error names the
// variables.
func (m *refMapping) apply(fs *flag.FlagSet, set map[string]bool) []error {
	var errs []error
	for _, s := range m.sets {
		if i := firstSet(s.guard, set); i >= 0 {
			for _, n := range s.from {
				if m.getenv(n) != "" {
					m.note(n, fmt.Sprintf("not used: -%s, given by flag or %s, wins", s.guard[i], config.EnvName(s.guard[i])), false)
				}
			}
			continue
		}
		for _, kv := range s.flags {
			f := fs.Lookup(kv[0])
			if f == nil {
				errs = append(errs, fmt.Errorf("%s: no flag -%s", strings.Join(s.from, ", "), kv[0]))
				continue
			}
			if err := f.Value.Set(kv[1]); err != nil {
				errs = append(errs, fmt.Errorf("%s: %q: %w", strings.Join(s.from, ", "), kv[1], err))
			}
			set[kv[0]] = true
		}
	}
	return errs
}

func firstSet(flags []string, set map[string]bool) int {
	for i, f := range flags {
		if set[f] {
			return i
		}
	}
	return -1
}

// refPort checks a port variable: a number from 0 to 65535.
func refPort(name, v string) (string, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q: want a port number", name, v)
	}
	return strconv.Itoa(n), nil
}

func refBool(name, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

func refDuration(name, v string) (string, error) {
	if _, err := time.ParseDuration(v); err != nil {
		return "", fmt.Errorf("%s=%q: want a duration such as 10s", name, v)
	}
	return v, nil
}

// hostPort maps a HOST/PORT pair of variables onto one address flag.
func hostPort(flagName, portVar string) func(m *refMapping, v []string) error {
	return func(m *refMapping, v []string) error {
		host, port := v[0], v[1]
		p, err := refPort(portVar, port)
		if err != nil {
			return err
		}
		m.set([]string{strings.TrimSuffix(portVar, "PORT") + "HOST", portVar}, nil, flagName, net.JoinHostPort(host, p))
		return nil
	}
}

// refReader says which store reads a variable that refFlag maps.
type refReader int

const (
	// anyStore: the variable maps onto its flag whatever holds the
	// counters.
	anyStore refReader = iota
	// redisOnly: only the Redis store reads it; without Redis the variable
	// is noted as not used (see refMapping.setRedis).
	redisOnly
)

// refFlag maps the variable name onto flagName, its value checked and
// converted by conv (nil takes it as is); reader says whether only the
// Redis store reads it.
func refFlag(name, flagName string, conv func(name, v string) (string, error), reader refReader) refVar {
	return refVar{names: []string{name}, to: func(m *refMapping, v []string) error {
		val := v[0]
		if conv != nil {
			var err error
			if val, err = conv(name, val); err != nil {
				return err
			}
		}
		if reader == redisOnly {
			m.setRedis(name, flagName, val)
		} else {
			m.set([]string{name}, nil, flagName, val)
		}
		return nil
	}}
}

func boolConv(name, v string) (string, error) {
	b, err := refBool(name, v)
	return strconv.FormatBool(b), err
}

func intConv(name, v string) (string, error) {
	if _, err := strconv.Atoi(v); err != nil {
		return "", fmt.Errorf("%s=%q: want a whole number", name, v)
	}
	return v, nil
}

// runtimePath joins RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and
// RUNTIME_APPDIRECTORY as the reference does; the rules are the files of
// that directory. With none set, the reference's default directory is used
// only if it exists, so that -config stays required elsewhere.
func runtimePath(m *refMapping, v []string) error {
	root, sub, app := v[0], v[1], v[2]
	p := filepath.Join(root, sub, app)
	if root == refDefaultRuntimeRoot && m.getenv("RUNTIME_ROOT") == "" && !m.exists(p) {
		return nil
	}
	m.set([]string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}, nil, "config", p)
	return nil
}
