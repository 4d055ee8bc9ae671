package rules

import (
	"errors"
	"fmt"
	"strings"
)

// Problem is one thing wrong in a rules file.
type Problem struct {
	File  string
	Line  int // 1-based; 0 when the problem is not on one line
	Field string
	Msg   string
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Field != "" {
		b.WriteString(": " + p.Field)
	}
	return b.String() + ": " + p.Msg
}

// ErrInvalid wraps every rules loading failure.
var ErrInvalid = errors.New("rules: invalid")

// Error lists every problem found in a set of rule files.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d problem(s) in rules:\n  %s", len(e.Problems), strings.Join(e.lines(), "\n  "))
}

// lines returns the Error of each problem, in order.
func (e *Error) lines() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.Error()
	}
	return out
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }
