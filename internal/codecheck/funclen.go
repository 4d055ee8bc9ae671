package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// MaxFuncLines is the most lines a non-test function may span, from its
// func keyword to its closing brace.
const MaxFuncLines = 100

// Func is a function found by a check: where it starts and how many lines it
// spans.
type Func struct {
	Pos   string // path relative to the root, then :line
	Name  string // "Recv.Name" for a method, "func literal" for a closure
	Lines int
}

func (f Func) String() string { return fmt.Sprintf("%s: %s (%d lines)", f.Pos, f.Name, f.Lines) }

// LongFuncs returns the functions and function literals of the Go files
// under root, test files excepted, that span more than maxLines lines. It
// skips generated files (a "Code generated ... DO NOT EDIT." comment, see
// ast.IsGenerated) and the directories go ignores: testdata, vendor and
// those whose name starts with "." or "_".
func LongFuncs(root string, maxLines int) ([]Func, error) {
	var long []Func
	err := walkGo(root, func(rel string, fset *token.FileSet, f *ast.File) {
		if strings.HasSuffix(rel, "_test.go") {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			name := ""
			switch fn := n.(type) {
			case *ast.FuncDecl:
				if fn.Body == nil {
					return true
				}
				name = fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					name = recvName(fn.Recv.List[0].Type) + "." + name
				}
			case *ast.FuncLit:
				name = "func literal"
			default:
				return true
			}
			start, end := fset.Position(n.Pos()), fset.Position(n.End())
			if lines := end.Line - start.Line + 1; lines > maxLines {
				long = append(long, Func{Pos: fmt.Sprintf("%s:%d", rel, start.Line), Name: name, Lines: lines})
			}
			return true
		})
	})
	return long, err
}

// ExamplesWithoutOutput returns the Example functions of the test files
// under root that have no "Output:" (or "Unordered output:") comment, which
// go test compiles but never runs. It skips the directories LongFuncs does.
func ExamplesWithoutOutput(root string) ([]Func, error) {
	var bad []Func
	err := walkGo(root, func(rel string, fset *token.FileSet, f *ast.File) {
		if !strings.HasSuffix(rel, "_test.go") {
			return
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			if !hasOutput(f, fn) {
				start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
				bad = append(bad, Func{Pos: fmt.Sprintf("%s:%d", rel, start.Line), Name: fn.Name.Name, Lines: end.Line - start.Line + 1})
			}
		}
	})
	return bad, err
}

// hasOutput reports whether a comment inside fn's body starts with go
// test's output marker.
func hasOutput(f *ast.File, fn *ast.FuncDecl) bool {
	for _, cg := range f.Comments {
		if cg.Pos() < fn.Body.Lbrace || cg.End() > fn.Body.Rbrace {
			continue
		}
		text := strings.TrimSpace(cg.Text())
		if strings.HasPrefix(text, "Output:") || strings.HasPrefix(text, "Unordered output:") {
			return true
		}
	}
	return false
}

// walkGo parses every non-generated Go file under root, outside the
// directories go ignores, and calls visit with its path relative to root.
func walkGo(root string, visit func(rel string, fset *token.FileSet, f *ast.File)) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		visit(filepath.ToSlash(rel), fset, f)
		return nil
	})
}

// recvName is the type name of a method's receiver, without * or type
// parameters.
func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
