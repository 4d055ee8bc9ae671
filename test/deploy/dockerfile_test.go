package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

const dockerFile = "Dockerfile"

// refBinary is where envoyproxy/ratelimit's image has its binary; Envoy
// Gateway and Istio start it with command: ["/bin/ratelimit"].
const refBinary = "/bin/ratelimit"

// checkDockerfile checks the image's final stage: its ENTRYPOINT binary is
// also at refBinary, as a symlink made in the build stage and copied as a
// directory (COPY follows a symlink named as its source, so it would copy
// the binary instead), and it EXPOSEs the sidecar's default ports.
func checkDockerfile(df string) error {
	var errs []error
	lines := dockerLines(df)
	last := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			last = i
		}
	}
	build, final := lines[:last], lines[last:]
	var entry []string
	var exposed []string
	var copies []string
	for _, l := range final {
		switch {
		case strings.HasPrefix(l, "ENTRYPOINT "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "ENTRYPOINT ")), &entry); err != nil {
				errs = append(errs, fmt.Errorf("%s: ENTRYPOINT not in exec form: %v", dockerFile, err))
			}
		case strings.HasPrefix(l, "EXPOSE "):
			exposed = append(exposed, strings.Fields(strings.TrimPrefix(l, "EXPOSE "))...)
		case strings.HasPrefix(l, "COPY "):
			copies = append(copies, l)
		}
	}
	if len(entry) == 0 {
		return errors.Join(append(errs, fmt.Errorf("%s: no ENTRYPOINT in the final stage", dockerFile))...)
	}
	for _, addr := range []string{config.DefaultGRPCAddr, config.DefaultHTTPAddr} {
		if p := strings.TrimPrefix(addr, ":"); !slices.Contains(exposed, p) {
			errs = append(errs, fmt.Errorf("%s: EXPOSE %v lacks the default port %s", dockerFile, exposed, p))
		}
	}
	// RUN ... ln -s <entry> <dir>/ratelimit, then COPY --from=... <dir>/ /bin/.
	var linkDir string
	for _, l := range build {
		f := strings.Fields(l)
		for i := 0; i+3 < len(f); i++ {
			if f[i] == "ln" && f[i+1] == "-s" && f[i+2] == entry[0] && filepath.Base(f[i+3]) == filepath.Base(refBinary) {
				linkDir = filepath.Dir(f[i+3])
			}
		}
	}
	if linkDir == "" {
		return errors.Join(append(errs, fmt.Errorf("%s: no `ln -s %s <dir>/ratelimit` in the build stage", dockerFile, entry[0]))...)
	}
	want := false
	for _, c := range copies {
		f := strings.Fields(c)
		if len(f) == 4 && strings.HasPrefix(f[1], "--from=") && strings.TrimSuffix(f[2], "/") == linkDir && strings.TrimSuffix(f[3], "/") == filepath.Dir(refBinary) {
			want = true
		}
	}
	if !want {
		errs = append(errs, fmt.Errorf("%s: final stage does not COPY %s/ to %s/, so %s is not the binary", dockerFile, linkDir, filepath.Dir(refBinary), refBinary))
	}
	return errors.Join(errs...)
}

// dockerLines returns the Dockerfile's instructions, continuation lines
// joined and comments dropped.
func dockerLines(df string) []string {
	var out []string
	cur := ""
	for l := range strings.SplitSeq(df, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || (l == "" && cur == "") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		out = append(out, strings.TrimSpace(cur+l))
		cur = ""
	}
	return out
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), dockerFile))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	if err := checkDockerfile(df); err != nil {
		t.Error(err)
	}
	for _, tt := range []struct{ name, old, new string }{
		{"no symlink", "ln -s /ratelimit-sidecar /out/bin/ratelimit", "true"},
		{"symlink not copied", "COPY --from=build /out/bin/ /bin/", ""},
		{"symlink copied by name", "COPY --from=build /out/bin/ /bin/", "COPY --from=build /out/bin/ratelimit /bin/ratelimit"},
		{"http port not exposed", "EXPOSE 8081 8080", "EXPOSE 8081"},
	} {
		mutated := strings.Replace(df, tt.old, tt.new, 1)
		if mutated == df {
			t.Errorf("%s: %q not in %s", tt.name, tt.old, dockerFile)
			continue
		}
		if checkDockerfile(mutated) == nil {
			t.Errorf("%s: checkDockerfile passes", tt.name)
		}
	}
}
