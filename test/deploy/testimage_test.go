package deploy_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The real-cluster tests run the sidecar from an image built on scratch (no registry is reachable to pull
// distroless), so that image must keep the runtime contract of the Dockerfile's final stage: what lands where,
// the user, the ports, the entrypoint and no shell. These checks keep the two files from drifting; test/k8s
// checks the built image itself.

const testImageFile = "test/k8s/images/sidecar.Containerfile"

// distrolessUsers are the users of gcr.io/distroless/static's images by name.
var distrolessUsers = map[string]string{"nonroot": "65532", "root": "0"}

// imageContract is the runtime side of an image's final stage.
type imageContract struct {
	from       string
	entrypoint string   // as written, exec form
	user       string   // a UID
	exposed    []string // sorted
	copiedTo   []string // COPY destinations, sorted, trailing slash dropped
}

func contractOf(file string) imageContract {
	lines := dockerLines(file)
	last := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			last = i
		}
	}
	var c imageContract
	exposed, copied := map[string]bool{}, map[string]bool{}
	for _, l := range lines[last:] {
		f := strings.Fields(l)
		switch f[0] {
		case "FROM":
			c.from = f[1]
		case "ENTRYPOINT":
			c.entrypoint = strings.TrimSpace(strings.TrimPrefix(l, "ENTRYPOINT"))
		case "USER":
			c.user = f[1]
			if uid, ok := distrolessUsers[f[1]]; ok {
				c.user = uid
			}
		case "EXPOSE":
			for _, p := range f[1:] {
				exposed[p] = true
			}
		case "COPY":
			copied[strings.TrimSuffix(f[len(f)-1], "/")] = true
		}
	}
	c.exposed = slices.Sorted(maps.Keys(exposed))
	c.copiedTo = slices.Sorted(maps.Keys(copied))
	return c
}

// checkTestImage requires the test image to have the Dockerfile's entrypoint, user, ports and files, on a base
// with no shell: scratch, or a distroless static image. The test image may add /etc, which distroless has.
func checkTestImage(dockerfile, testImage string) error {
	want, got := contractOf(dockerfile), contractOf(testImage)
	var errs []error
	if got.entrypoint != want.entrypoint {
		errs = append(errs, fmt.Errorf("%s: ENTRYPOINT %s, want %s's %s", testImageFile, got.entrypoint, dockerFile, want.entrypoint))
	}
	if got.user == "" || got.user != want.user {
		errs = append(errs, fmt.Errorf("%s: USER %q, want UID %q as %s", testImageFile, got.user, want.user, dockerFile))
	}
	if !slices.Equal(got.exposed, want.exposed) {
		errs = append(errs, fmt.Errorf("%s: EXPOSE %v, want %s's %v", testImageFile, got.exposed, dockerFile, want.exposed))
	}
	if extra := slices.DeleteFunc(slices.Clone(got.copiedTo), func(d string) bool { return d == "/etc" }); !slices.Equal(extra, want.copiedTo) {
		errs = append(errs, fmt.Errorf("%s: COPY to %v, want %s's %v (and /etc)", testImageFile, got.copiedTo, dockerFile, want.copiedTo))
	}
	if got.from != "scratch" && !strings.HasPrefix(got.from, "gcr.io/distroless/static") {
		errs = append(errs, fmt.Errorf("%s: FROM %s, want scratch (no shell, as distroless)", testImageFile, got.from))
	}
	if !strings.HasPrefix(want.from, "gcr.io/distroless/static") {
		errs = append(errs, fmt.Errorf("%s: final stage FROM %s: the test image mirrors distroless/static; update %s", dockerFile, want.from, testImageFile))
	}
	return errors.Join(errs...)
}

func TestTestImageMatchesDockerfile(t *testing.T) {
	root := repoRoot(t)
	df, err := os.ReadFile(filepath.Join(root, dockerFile))
	if err != nil {
		t.Fatal(err)
	}
	ti, err := os.ReadFile(filepath.Join(root, testImageFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTestImage(string(df), string(ti)); err != nil {
		t.Error(err)
	}
	for _, tt := range []struct {
		name, old, new string
		inDockerfile   bool
	}{
		{"entrypoint differs", `ENTRYPOINT ["/ratelimit-sidecar"]`, `ENTRYPOINT ["/bin/ratelimit"]`, false},
		{"user differs", "USER 65532", "USER 1000", false},
		{"dockerfile user changes", "USER nonroot", "USER root", true},
		{"port dropped", "EXPOSE 8081 8080", "EXPOSE 8081", false},
		{"dockerfile port added", "EXPOSE 8081 8080", "EXPOSE 8081 8080 6070", true},
		{"no /bin/ratelimit", "COPY bin/ /bin/", "", false},
		{"base with a shell", "FROM scratch", "FROM debian:bookworm", false},
	} {
		d, i := string(df), string(ti)
		target := &i
		if tt.inDockerfile {
			target = &d
		}
		mutated := strings.Replace(*target, tt.old, tt.new, 1)
		if mutated == *target {
			t.Errorf("%s: %q not found", tt.name, tt.old)
			continue
		}
		*target = mutated
		if checkTestImage(d, i) == nil {
			t.Errorf("%s: checkTestImage passes", tt.name)
		}
	}
}
