package rules

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Options change how rules load. The zero Options is the default.
type Options struct {
	// MergeDomains lets several files define one domain: their top-level
	// descriptors join into one tree, in the order the files load, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. A descriptor that
	// two files define at the same level is an error naming both, and the
	// files must agree on the domain's failure_mode and algorithm. When
	// false, a domain defined by two files is an error.
	MergeDomains bool
}

// Load reads a rules file, or every *.yaml and *.yml file of a directory,
// with the zero Options; see Options.Load.
func Load(path string) (*Set, error) { return Options{}.Load(path) }

// Load reads a rules file, or every *.yaml and *.yml file of a directory
// in name order (hidden files, such as a Kubernetes ConfigMap's ..data,
// are skipped; its symlinked files are read). Each file holds one domain;
// two files with the same domain are an error unless o.MergeDomains. All
// problems of all files are returned at once as a *Error.
func (o Options) Load(path string) (*Set, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, &Error{Problems: []Problem{{File: path, Msg: err.Error()}}}
	}
	files := []string{path}
	if info.IsDir() {
		files, err = ruleFiles(path)
		if err != nil {
			return nil, &Error{Problems: []Problem{{File: path, Msg: err.Error()}}}
		}
	}
	sources := make(map[string][]byte, len(files))
	var problems []Problem
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			problems = append(problems, Problem{File: f, Msg: err.Error()})
			continue
		}
		sources[f] = data
	}
	rules, err := o.Parse(files, sources)
	if err != nil {
		var re *Error
		if errors.As(err, &re) {
			re.Problems = append(problems, re.Problems...)
			return nil, re
		}
		return nil, err
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return rules, nil
}

func ruleFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if ext := filepath.Ext(name); ext != ".yaml" && ext != ".yml" {
			continue
		}
		full := filepath.Join(dir, name)
		if st, err := os.Stat(full); err != nil || st.IsDir() {
			continue // a dangling link or a directory named like a file
		}
		files = append(files, full)
	}
	sort.Strings(files)
	return files, nil
}

// Parse decodes and compiles the given files with the zero Options; see
// Options.Parse.
func Parse(files []string, sources map[string][]byte) (*Set, error) {
	return Options{}.Parse(files, sources)
}

// Parse decodes and compiles the given files, in order, from their
// contents: it is what Load does after reading. All problems of all files
// are returned at once as an *Error.
func (o Options) Parse(files []string, sources map[string][]byte) (*Set, error) {
	b := newBuilder(o, files)
	for _, name := range files {
		f, problems := Decode(name, sources[name])
		b.add(name, f, problems)
	}
	return b.done()
}
