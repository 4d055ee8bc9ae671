package codecheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// AlgorithmFiles are the files of the repository that may branch on a
// window.Algorithm: the table and the four algorithms' files in pkg/window,
// the script protocol's table in redisstore, the rules' per-algorithm
// validation, and storetest's guarantee oracle, which checks each
// algorithm's promise apart from the code it checks. Everywhere else code
// asks the algorithm's value (docs/development.md, "Adding an algorithm").
var AlgorithmFiles = []string{
	"pkg/window/algorithm.go",
	"pkg/window/fixed.go",
	"pkg/window/sliding.go",
	"pkg/window/bucket.go",
	"pkg/window/log.go",
	"pkg/window/redisstore/algorithms.go",
	"pkg/rules/algorithm.go",
	"internal/testutil/storetest/guarantee.go",
}

// algorithmNames are window.Algorithm's constants.
var algorithmNames = []string{"FixedWindow", "SlidingWindow", "TokenBucket", "SlidingLog"}

// Site is a place in the source.
type Site struct {
	Pos  string // path relative to the root, then :line
	What string
}

func (s Site) String() string { return s.Pos + ": " + s.What }

// AlgorithmBranches returns the sites in the non-test Go files of the
// module at root, outside allowed (paths relative to root) and outside
// nested modules (bench/), that branch on which algorithm a value is: an
// == or != with one of window.Algorithm's constants, or a switch with a
// case that names one. It finds them by syntax, so it also catches a
// switch on a plain variable of type Algorithm.
func AlgorithmBranches(root string, allowed []string) ([]Site, error) {
	var sites []Site
	err := walkGo(root, func(rel string, fset *token.FileSet, f *ast.File) {
		if strings.HasSuffix(rel, "_test.go") || slices.Contains(allowed, rel) || inNestedModule(root, rel) {
			return
		}
		at := func(n ast.Node) string { return fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line) }
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isAlgorithmConst(n.X) || isAlgorithmConst(n.Y)) {
					sites = append(sites, Site{at(n), n.Op.String() + " on an Algorithm"})
				}
			case *ast.SwitchStmt:
				if switchesOnAlgorithm(n) {
					sites = append(sites, Site{at(n), "switch on an Algorithm"})
				}
			}
			return true
		})
	})
	return sites, err
}

// switchesOnAlgorithm reports whether a case of s names an algorithm.
func switchesOnAlgorithm(s *ast.SwitchStmt) bool {
	for _, st := range s.Body.List {
		for _, e := range st.(*ast.CaseClause).List {
			found := false
			ast.Inspect(e, func(n ast.Node) bool {
				if ex, ok := n.(ast.Expr); ok && isAlgorithmConst(ex) {
					found = true
				}
				return !found
			})
			if found {
				return true
			}
		}
	}
	return false
}

// isAlgorithmConst reports whether e names one of window.Algorithm's
// constants, qualified or not.
func isAlgorithmConst(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return slices.Contains(algorithmNames, e.Name)
	case *ast.SelectorExpr:
		return slices.Contains(algorithmNames, e.Sel.Name)
	case *ast.ParenExpr:
		return isAlgorithmConst(e.X)
	}
	return false
}

// inNestedModule reports whether the file rel lies in a directory below
// root that has a go.mod of its own.
func inNestedModule(root, rel string) bool {
	for dir := path.Dir(rel); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir), "go.mod")); err == nil {
			return true
		}
	}
	return false
}
