package racetest

// BuildArgs returns the arguments of "go build" for args, with -race first
// when the calling binary was built with it.
func BuildArgs(args ...string) []string {
	out := []string{"build"}
	if Enabled {
		out = append(out, "-race")
	}
	return append(out, args...)
}
