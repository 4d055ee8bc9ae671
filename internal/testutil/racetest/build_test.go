package racetest

import (
	"slices"
	"testing"
)

func TestBuildArgs(t *testing.T) {
	args := BuildArgs("-o", "x", ".")
	if got := slices.Contains(args, "-race"); got != Enabled {
		t.Errorf("BuildArgs = %v, want -race exactly when Enabled (%v)", args, Enabled)
	}
	if args[0] != "build" || !slices.Equal(args[len(args)-3:], []string{"-o", "x", "."}) {
		t.Errorf("BuildArgs = %v, want build, [-race,] then the arguments", args)
	}
}
