package codecheck

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
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

// Layer is one case of a layering check: Pkg (a go list pattern) reaches
// some forbidden package, directly or not, exactly when Reached is true.
// A check lists a package that must reach one beside those that must not,
// so that it is seen to detect a dependency at all.
type Layer struct {
	Pkg     string
	Reached bool
}

// CheckLayers reports through t every case of layers whose package does or
// does not reach a package that forbidden reports, against its Reached.
func CheckLayers(t testing.TB, forbidden func(importPath string) bool, layers ...Layer) {
	t.Helper()
	for _, l := range layers {
		got, err := Reaches(l.Pkg, forbidden)
		if err != nil {
			t.Fatal(err)
		}
		if (len(got) > 0) != l.Reached {
			t.Errorf("go list -deps %s reaches %v; want some of them reached: %v", l.Pkg, got, l.Reached)
		}
	}
}
