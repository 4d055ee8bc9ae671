//go:build compose

// Package compose runs docker-compose.yml for real, with podman-compose and the local images of
// scripts/images.sh (no registry is reachable), and checks what a client of the README's example sees.
package compose

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// The sidecar's image as scripts/images.sh tags it, for the service that docker-compose.yml builds.
const sidecarImage = "docker.io/library/ratelimit-sidecar:dev"

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// cmdTimeout bounds each podman or podman-compose command.
const cmdTimeout = 3 * time.Minute

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut // stdout only is returned: scripts print paths there, progress on stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// composeFile is docker-compose.yml changed only where this machine needs it: the sidecar's service uses the
// prebuilt local image instead of building the Dockerfile (whose base images cannot be pulled here), Envoy is
// published on a loopback port the kernel picks instead of 8080, and relative volume paths are made absolute
// so that the copy runs from a temporary directory.
func composeFile(t *testing.T, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	services := doc["services"].(map[string]any)
	for name, s := range services {
		svc := s.(map[string]any)
		if _, ok := svc["build"]; ok {
			if name != "ratelimit" {
				t.Fatalf("service %s builds an image; only the sidecar's has a local one", name)
			}
			delete(svc, "build")
			svc["image"] = sidecarImage
		}
		if vols, ok := svc["volumes"].([]any); ok {
			for i, v := range vols {
				if s := v.(string); strings.HasPrefix(s, "./") {
					vols[i] = filepath.Join(root, s[2:])
				}
			}
		}
	}
	envoy := services["envoy"].(map[string]any)
	if p := fmt.Sprint(envoy["ports"]); p != "[8080:8080]" {
		t.Fatalf("envoy ports %s, want [8080:8080] as the README documents", p)
	}
	envoy["ports"] = []any{"127.0.0.1::8080"}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "docker-compose.yml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestComposeUpTo429 brings the compose file up and sends the README's request sequence: limit × 200 for one
// API key and path, then 429 with retry-after and the JSON body.
func TestComposeUpTo429(t *testing.T) {
	root := repoRoot(t)
	pc := strings.TrimSpace(run(t, filepath.Join(root, "scripts", "podman-compose.sh")))
	run(t, "podman", "image", "exists", sidecarImage) // scripts/images.sh builds it
	file := composeFile(t, root)
	project := fmt.Sprintf("rlscompose%d", os.Getpid())
	compose := func(args ...string) string {
		return run(t, pc, append([]string{"-p", project, "-f", file}, args...)...)
	}
	start := time.Now()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, pc, "-p", project, "-f", file, "down", "-t", "2")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("podman-compose down: %v\n%s", err, out)
		}
	})
	compose("up", "-d", "--no-build")
	name := strings.TrimSpace(run(t, "podman", "ps", "--filter", "label=io.podman.compose.project="+project,
		"--filter", "label=com.docker.compose.service=envoy", "--format", "{{.Names}}"))
	hostPort := strings.TrimSpace(run(t, "podman", "port", name, "8080"))
	url := "http://" + hostPort + "/hello"
	c := &http.Client{Timeout: 2 * time.Second}
	get := func(key string) (*http.Response, string, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("x-api-key", key)
		resp, err := c.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp, b.String(), nil
	}
	// Up once Envoy answers with the sidecar's x-ratelimit headers (until then it fails open, uncounted).
	var last string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		resp, _, err := get("warmup")
		if err == nil && resp.StatusCode == 200 && resp.Header.Get("x-ratelimit-limit") != "" {
			break
		}
		last = fmt.Sprint(err)
		if err == nil {
			last = resp.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("compose: no rate-limited 200 from Envoy within 60s (last: %s)\n%s", last, compose("logs"))
		}
	}
	t.Logf("compose up: first rate-limited answer after %v", time.Since(start).Round(time.Millisecond))
	// The limits are per minute, in windows aligned to the minute: start the 21 requests early in one.
	if now := time.Now(); now.Second() > 50 {
		time.Sleep(time.Duration(61-now.Second()) * time.Second)
	}
	key := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	var codes []int
	for range 21 {
		resp, body, err := get(key)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("retry-after") == "" || !strings.Contains(body, `"error":"too_many_requests"`) {
				t.Errorf("429 without retry-after or JSON body: %v %q", resp.Header, body)
			}
		}
	}
	want := append(bytes.Repeat([]byte{0}, 20), 1)
	for i, code := range codes {
		if (want[i] == 1) != (code == http.StatusTooManyRequests) || (want[i] == 0 && code != http.StatusOK) {
			t.Fatalf("codes %v, want 20 × 200 then 429 (20 a minute per key and path)", codes)
		}
	}
	t.Logf("codes %v", codes)
}
