package deploy_test

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

// Checks of the sidecar container in deploy/k8s against the sidecar's flags and the Envoy bootstrap.

// setting is a sidecar flag's value as the container sets it: the flag in args (-name v, --name v,
// -name=v), else the RLS_NAME environment variable, else the default.
func setting(c *corev1.Container, name, def string) string {
	args := append(slices.Clone(c.Command), c.Args...)
	for i := len(args) - 1; i >= 0; i-- { // the last one wins, as with package flag
		for _, p := range []string{"-" + name, "--" + name} {
			if args[i] == p && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(args[i], p+"="); ok {
				return v
			}
		}
	}
	env := config.EnvName(name)
	for _, e := range c.Env {
		if e.Name == env {
			return e.Value
		}
	}
	return def
}

func checkSidecarOrder(b *bundle) error {
	var errs []error
	si, s, err := b.initContainer(sidecarContainer)
	if err != nil {
		return err
	}
	ei, e, err := b.initContainer(envoyContainer)
	if err != nil {
		return err
	}
	for _, c := range []*corev1.Container{s, e} {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			errs = append(errs, fmt.Errorf("init container %s: restartPolicy = %v, want Always (a native sidecar)", c.Name, c.RestartPolicy))
		}
	}
	if si > ei {
		errs = append(errs, fmt.Errorf("init container %s is at %d, after %s at %d: Envoy would start before the service it calls", s.Name, si, e.Name, ei))
	}
	if s.StartupProbe == nil {
		errs = append(errs, fmt.Errorf("init container %s: no startupProbe, so %s does not wait for it", s.Name, e.Name))
	}
	return errors.Join(errs...)
}

func checkSidecarPorts(b *bundle) error {
	var errs []error
	_, s, err := b.initContainer(sidecarContainer)
	if err != nil {
		return err
	}
	grpcPort, err := addrPort(setting(s, "grpc-addr", config.DefaultGRPCAddr))
	if err != nil {
		return fmt.Errorf("container %s: -grpc-addr: %w", s.Name, err)
	}
	httpPort, err := addrPort(setting(s, "http-addr", config.DefaultHTTPAddr))
	if err != nil {
		return fmt.Errorf("container %s: -http-addr: %w", s.Name, err)
	}
	if p, err := containerPort(s, sidecarGRPCPort); err != nil || p != grpcPort {
		errs = append(errs, fmt.Errorf("container %s: port %s = %d (%v), want -grpc-addr's %d", s.Name, sidecarGRPCPort, p, err, grpcPort))
	}
	if p, err := containerPort(s, sidecarHTTPPort); err != nil || p != httpPort {
		errs = append(errs, fmt.Errorf("container %s: port %s = %d (%v), want -http-addr's %d", s.Name, sidecarHTTPPort, p, err, httpPort))
	}
	// Envoy's listeners share the pod's network with the sidecar.
	for _, l := range b.envoy[envoyFile].GetStaticResources().GetListeners() {
		if p := int32(listenerPort(l)); p == httpPort || p == grpcPort {
			errs = append(errs, fmt.Errorf("container %s: port %d is also %s's listener %s in the same pod", s.Name, p, envoyFile, l.GetName()))
		}
	}
	errs = append(errs, checkSidecarProbes(s, grpcPort, httpPort))
	// Envoy in the same pod dials the sidecar's gRPC port on loopback.
	c, err := b.cluster(envoyFile, rlsCluster)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	a, err := endpoint(envoyFile, c)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if sa := a.GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || int32(sa.GetPortValue()) != grpcPort {
		errs = append(errs, fmt.Errorf("%s: cluster %s at %s:%d, want 127.0.0.1:%d, the sidecar's -grpc-addr", envoyFile, rlsCluster, sa.GetAddress(), sa.GetPortValue(), grpcPort))
	}
	return errors.Join(errs...)
}

func checkSidecarRulesMount(b *bundle) error {
	_, s, err := b.initContainer(sidecarContainer)
	if err != nil {
		return err
	}
	config := setting(s, "config", "")
	var vol *corev1.Volume
	for i, v := range b.deployment.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == rulesConfigMap {
			vol = &b.deployment.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil {
		return fmt.Errorf("deployment: no volume of ConfigMap %s", rulesConfigMap)
	}
	var errs []error
	if len(vol.ConfigMap.Items) != 0 {
		errs = append(errs, fmt.Errorf("volume %s: items %v select keys; mount every rules file", vol.Name, vol.ConfigMap.Items))
	}
	var mounts []corev1.VolumeMount
	for _, m := range s.VolumeMounts {
		if m.Name == vol.Name {
			mounts = append(mounts, m)
		}
	}
	if len(mounts) != 1 {
		return errors.Join(append(errs, fmt.Errorf("container %s: %d mounts of volume %s, want 1", s.Name, len(mounts), vol.Name))...)
	}
	m := mounts[0]
	if m.SubPath != "" || m.SubPathExpr != "" {
		errs = append(errs, fmt.Errorf("container %s: rules mounted with subPath %q%q: such a mount never sees ConfigMap updates", s.Name, m.SubPath, m.SubPathExpr))
	}
	if m.MountPath != config {
		errs = append(errs, fmt.Errorf("container %s: rules mounted at %q, want -config's %q", s.Name, m.MountPath, config))
	}
	return errors.Join(errs...)
}

func checkSidecarHardening(b *bundle) error {
	_, s, err := b.initContainer(sidecarContainer)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := s.Resources.Requests[r]; !ok {
			errs = append(errs, fmt.Errorf("container %s: no %s request", s.Name, r))
		}
		if _, ok := s.Resources.Limits[r]; !ok {
			errs = append(errs, fmt.Errorf("container %s: no %s limit", s.Name, r))
		}
	}
	sc := s.SecurityContext
	podSC := b.deployment.Spec.Template.Spec.SecurityContext
	nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (podSC != nil && podSC.RunAsNonRoot != nil && *podSC.RunAsNonRoot)
	uid := sc != nil && sc.RunAsUser != nil && *sc.RunAsUser != 0
	if !nonRoot || !uid {
		errs = append(errs, fmt.Errorf("container %s: want runAsNonRoot and a numeric non-zero runAsUser (distroless names its user, which the kubelet cannot check)", s.Name))
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		errs = append(errs, fmt.Errorf("container %s: root filesystem not read-only", s.Name))
	}
	return errors.Join(errs...)
}

// checkRedisURL: the sidecar's Redis URL names a Service of these manifests, on one of its ports.
func checkRedisURL(b *bundle) error {
	_, s, err := b.initContainer(sidecarContainer)
	if err != nil {
		return err
	}
	raw := setting(s, "redis-url", "")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "redis" {
		return fmt.Errorf("container %s: redis URL %q, want redis://host:port/db (%v)", s.Name, raw, err)
	}
	svc, ok := b.services[u.Hostname()]
	if !ok {
		return fmt.Errorf("container %s: redis URL host %q is no Service in %s", s.Name, u.Hostname(), k8sDir)
	}
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == u.Port() {
			return nil
		}
	}
	return fmt.Errorf("container %s: redis URL port %q is not a port of Service %s", s.Name, u.Port(), svc.Name)
}

// checkSidecarProbes requires a startup and a liveness probe, and that every probe of the sidecar asks whether
// the process serves, never whether Redis answers: GET /healthz on -http-addr, or a TCP connect to either
// port. gRPC health and GET /readyz or /healthcheck turn NOT_SERVING while Redis is unreachable, and a probe on
// them turns a Redis outage into restarts (liveness) and an edge outage (readiness, which gates Envoy's pod).
func checkSidecarProbes(s *corev1.Container, grpcPort, httpPort int32) error {
	var errs []error
	probes := map[string]*corev1.Probe{"startupProbe": s.StartupProbe, "readinessProbe": s.ReadinessProbe, "livenessProbe": s.LivenessProbe}
	for _, name := range slices.Sorted(maps.Keys(probes)) {
		p := probes[name]
		if p == nil {
			if name != "readinessProbe" { // without one the container is ready once started
				errs = append(errs, fmt.Errorf("container %s: no %s", s.Name, name))
			}
			continue
		}
		switch {
		case p.GRPC != nil:
			errs = append(errs, fmt.Errorf("container %s: %s is a gRPC health probe, which is NOT_SERVING while Redis is down", s.Name, name))
		case p.HTTPGet != nil:
			port, err := resolvePort(s, p.HTTPGet.Port)
			if err != nil || port != httpPort {
				errs = append(errs, fmt.Errorf("container %s: %s port %s = %d (%v), want -http-addr's %d", s.Name, name, p.HTTPGet.Port.String(), port, err, httpPort))
			}
			if p.HTTPGet.Path != livenessPath {
				errs = append(errs, fmt.Errorf("container %s: %s GET %s, want %s (the others follow Redis)", s.Name, name, p.HTTPGet.Path, livenessPath))
			}
		case p.TCPSocket != nil:
			if port, err := resolvePort(s, p.TCPSocket.Port); err != nil || (port != httpPort && port != grpcPort) {
				errs = append(errs, fmt.Errorf("container %s: %s tcpSocket port %s = %d (%v), want -grpc-addr's %d or -http-addr's %d", s.Name, name, p.TCPSocket.Port.String(), port, err, grpcPort, httpPort))
			}
		default:
			errs = append(errs, fmt.Errorf("container %s: %s is neither httpGet nor tcpSocket", s.Name, name))
		}
	}
	return errors.Join(errs...)
}
