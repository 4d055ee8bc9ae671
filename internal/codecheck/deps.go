package codecheck

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Reaches returns the packages that pkg (a go list pattern, such as "." or
// "./redisstore", relative to the working directory) imports, directly or
// not, and that forbidden reports, as `go list -deps` lists them. It runs
// the go on PATH, which go test puts first.
func Reaches(pkg string, forbidden func(importPath string) bool) ([]string, error) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list -deps %s: %w\n%s", pkg, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list -deps %s: %w", pkg, err)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		if forbidden(p) {
			found = append(found, p)
		}
	}
	return found, nil
}
