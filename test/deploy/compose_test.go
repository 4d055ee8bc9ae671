package deploy_test

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// Checks of docker-compose.yml against the Envoy bootstrap and the rules it mounts.

// compose is the subset of the Compose file format that docker-compose.yml may use.
type compose struct {
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image       string            `json:"image"`
	Build       string            `json:"build"`
	Ports       []string          `json:"ports"`
	Environment map[string]string `json:"environment"`
	Volumes     []string          `json:"volumes"`
	Command     []string          `json:"command"`
	DependsOn   []string          `json:"depends_on"`
}

// volumeTarget returns the container path a compose volume "src:dst[:mode]" mounts src at.
func volumeTarget(s composeService, src string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && filepath.Clean(parts[0]) == filepath.Clean(src) {
			return parts[1], true
		}
	}
	return "", false
}

func checkCompose(b *bundle) error {
	var errs []error
	svcs := b.compose.Services
	for name, s := range svcs {
		if (s.Image == "") == (s.Build == "") {
			errs = append(errs, fmt.Errorf("%s: service %s needs exactly one of image and build", composeFile, name))
		}
		for _, d := range s.DependsOn {
			if _, ok := svcs[d]; !ok {
				errs = append(errs, fmt.Errorf("%s: service %s depends on unknown service %s", composeFile, name, d))
			}
		}
	}
	envoy, ok := svcs["envoy"]
	if !ok {
		return errors.Join(append(errs, fmt.Errorf("%s: no envoy service", composeFile))...)
	}
	if want := "envoyproxy/envoy:v" + b.envoyVersion; envoy.Image != want {
		errs = append(errs, fmt.Errorf("%s: envoy image %s, want %s", composeFile, envoy.Image, want))
	}
	if dst, ok := volumeTarget(envoy, "./"+envoyComposeFile); !ok || dst != "/etc/envoy/envoy.yaml" {
		errs = append(errs, fmt.Errorf("%s: envoy does not mount %s at /etc/envoy/envoy.yaml (the image's default config)", composeFile, envoyComposeFile))
	}
	l, _, _, err := b.ingress(envoyComposeFile)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	published := false
	for _, p := range envoy.Ports {
		if strings.HasSuffix(p, ":"+strconv.Itoa(int(listenerPort(l)))) {
			published = true
		}
	}
	if !published {
		errs = append(errs, fmt.Errorf("%s: envoy ports %v do not publish the ingress listener's %d", composeFile, envoy.Ports, listenerPort(l)))
	}
	rl, ok := svcs["ratelimit"]
	if !ok {
		return errors.Join(append(errs, fmt.Errorf("%s: no ratelimit service", composeFile))...)
	}
	rulesDir := "./" + filepath.Dir(rulesFile)
	if dst, ok := volumeTarget(rl, rulesDir); !ok || dst != rl.Environment["RLS_CONFIG"] {
		errs = append(errs, fmt.Errorf("%s: ratelimit mounts %s at %q, want RLS_CONFIG %q", composeFile, rulesDir, dst, rl.Environment["RLS_CONFIG"]))
	}
	u, err := url.Parse(rl.Environment["RLS_REDIS_URL"])
	if err != nil || u.Scheme != "redis" {
		errs = append(errs, fmt.Errorf("%s: ratelimit RLS_REDIS_URL %q is not redis://host:port/db", composeFile, rl.Environment["RLS_REDIS_URL"]))
	} else if _, ok := svcs[u.Hostname()]; !ok {
		errs = append(errs, fmt.Errorf("%s: RLS_REDIS_URL host %q is no service", composeFile, u.Hostname()))
	}
	return errors.Join(errs...)
}
