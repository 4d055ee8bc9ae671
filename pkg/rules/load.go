package rules

import (
	"errors"
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

// Parse decodes and compiles the given files, in order, from their
// contents: it is what Load does after reading. All problems of all files
// are returned at once as an *Error.
func Parse(files []string, sources map[string][]byte) (*Set, error) {
	b := newBuilder(files)
	for _, name := range files {
		f, problems := Decode(name, sources[name])
		b.add(name, f, problems)
	}
	return b.done()
}
