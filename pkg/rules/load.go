package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Load reads a rules file, or every *.yaml and *.yml file of a
// directory (hidden files, such as a Kubernetes ConfigMap's ..data, are
// skipped; its symlinked files are read). Each file holds one domain; two
// files with the same domain are an error. All problems of all files are
// returned at once as a *Error.
func Load(path string) (*Set, error) {
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
	rules, err := Parse(files, sources)
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

// Parse compiles the given files, in order, from their contents. It is
// what Load does after reading.
func Parse(files []string, sources map[string][]byte) (*Set, error) {
	r := &Set{domains: make(map[string]*Domain), files: files}
	var problems []Problem
	seen := make(map[string]Problem)
	for _, f := range files {
		d := &decoder{file: f}
		dom := d.file1(sources[f])
		problems = append(problems, d.problems...)
		if dom == nil || len(d.problems) > 0 {
			continue
		}
		if first, dup := seen[dom.Name]; dup {
			problems = append(problems, Problem{File: f, Line: d.domainLine, Field: "domain",
				Msg: fmt.Sprintf("domain %q is already defined in %s:%d", dom.Name, first.File, first.Line)})
			continue
		}
		seen[dom.Name] = Problem{File: f, Line: d.domainLine}
		r.domains[dom.Name] = dom
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return r, nil
}
