package deploy_test

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

// Checks of the Kubernetes manifests in deploy/k8s, other than the sidecar container's (sidecar_test.go).

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

func container(cs []corev1.Container, name string) (int, *corev1.Container) {
	for i := range cs {
		if cs[i].Name == name {
			return i, &cs[i]
		}
	}
	return -1, nil
}

func (b *bundle) initContainer(name string) (int, *corev1.Container, error) {
	i, c := container(b.deployment.Spec.Template.Spec.InitContainers, name)
	if c == nil {
		return -1, nil, fmt.Errorf("deployment %s: no init container %q", b.deployment.Name, name)
	}
	return i, c, nil
}

func addrPort(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	return int32(n), err
}

func containerPort(c *corev1.Container, name string) (int32, error) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("container %s: no port named %q", c.Name, name)
}

// resolvePort turns a probe's or Service's port (a number or a container port name) into a number.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, error) {
	if p.Type == intstr.Int {
		return p.IntVal, nil
	}
	return containerPort(c, p.StrVal)
}

func (b *bundle) podLabels() labels.Set { return labels.Set(b.deployment.Spec.Template.Labels) }

func checkKustomization(b *bundle) error {
	var errs []error
	k := b.kustomization
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		errs = append(errs, fmt.Errorf("kustomization.yaml: %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind))
	}
	listed := slices.Sorted(slices.Values(k.Resources))
	files := slices.Sorted(slices.Values(b.manifests))
	if !slices.Equal(listed, files) {
		errs = append(errs, fmt.Errorf("kustomization.yaml resources = %v, want the manifests in %s: %v", listed, k8sDir, files))
	}
	return errors.Join(errs...)
}

func checkEnvoyContainer(b *bundle) error {
	_, e, err := b.initContainer(envoyContainer)
	if err != nil {
		return err
	}
	var errs []error
	if want := "envoyproxy/envoy:v" + b.envoyVersion; e.Image != want {
		errs = append(errs, fmt.Errorf("container %s: image %s, want %s (the version %s validates with)", e.Name, e.Image, want, envoyScript))
	}
	// The bootstrap comes from the envoy-config ConfigMap, mounted as a directory.
	cfg := setting(e, "c", "")
	var vol string
	for _, v := range b.deployment.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == envoyConfigMap {
			vol = v.Name
		}
	}
	mounted := false
	for _, m := range e.VolumeMounts {
		if m.Name == vol && m.SubPath == "" && filepath.Join(m.MountPath, "envoy.yaml") == cfg {
			mounted = true
		}
	}
	if !mounted {
		errs = append(errs, fmt.Errorf("container %s: -c %q is not envoy.yaml in a directory mount of ConfigMap %s", e.Name, cfg, envoyConfigMap))
	}
	// Readiness goes through the health listener of the bootstrap (the admin is loopback only).
	health, err := b.listener(envoyFile, "health")
	switch {
	case err != nil:
		errs = append(errs, err)
	case e.ReadinessProbe == nil || e.ReadinessProbe.HTTPGet == nil:
		errs = append(errs, fmt.Errorf("container %s: no HTTP readiness probe", e.Name))
	default:
		p, err := resolvePort(e, e.ReadinessProbe.HTTPGet.Port)
		if err != nil || uint32(p) != listenerPort(health) {
			errs = append(errs, fmt.Errorf("container %s: readiness probe port %d (%v), want the health listener's %d", e.Name, p, err, listenerPort(health)))
		}
	}
	// preStop fails the admin health check, then sleeps for less than the grace period.
	admin := b.envoy[envoyFile].GetAdmin().GetAddress().GetSocketAddress()
	if e.Lifecycle == nil || e.Lifecycle.PreStop == nil || e.Lifecycle.PreStop.Exec == nil {
		return errors.Join(append(errs, fmt.Errorf("container %s: no exec preStop hook", e.Name))...)
	}
	script := strings.Join(e.Lifecycle.PreStop.Exec.Command, " ")
	if !strings.Contains(script, "POST /healthcheck/fail") || !strings.Contains(script, fmt.Sprintf("%s/%d", admin.GetAddress(), admin.GetPortValue())) {
		errs = append(errs, fmt.Errorf("container %s: preStop %q does not POST /healthcheck/fail to the admin at %s:%d", e.Name, script, admin.GetAddress(), admin.GetPortValue()))
	}
	m := regexp.MustCompile(`\bsleep (\d+)\b`).FindStringSubmatch(script)
	grace := b.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	if m == nil {
		errs = append(errs, fmt.Errorf("container %s: preStop does not sleep to drain", e.Name))
	} else if n, _ := strconv.ParseInt(m[1], 10, 64); grace == nil || *grace <= n {
		errs = append(errs, fmt.Errorf("terminationGracePeriodSeconds = %v, want more than the preStop sleep %d", grace, n))
	}
	return errors.Join(errs...)
}

func checkServiceAndPDB(b *bundle) error {
	var errs []error
	pod := b.podLabels()
	_, e, err := b.initContainer(envoyContainer)
	if err != nil {
		return err
	}
	l, _, _, err := b.ingress(envoyFile)
	if err != nil {
		return err
	}
	svc, ok := b.services[b.deployment.Name]
	if !ok {
		return fmt.Errorf("%s: no Service %s for the Deployment", k8sDir, b.deployment.Name)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
		errs = append(errs, fmt.Errorf("Service %s: selector %v does not match the pod labels %v", svc.Name, svc.Spec.Selector, pod))
	}
	if len(svc.Spec.Ports) != 1 {
		errs = append(errs, fmt.Errorf("Service %s: %d ports, want 1", svc.Name, len(svc.Spec.Ports)))
	}
	for _, p := range svc.Spec.Ports {
		// As the endpoint controllers resolve it, across the whole pod, on each side of the change in 1.32.
		for _, v := range []kubeVersion{{1, 31}, {1, 32}} {
			tp, c, err := endpointPort(&b.deployment.Spec.Template.Spec, p, v)
			if err != nil || uint32(tp) != listenerPort(l) || c != e.Name {
				errs = append(errs, fmt.Errorf("Service %s: on Kubernetes %s targetPort %s is port %d of container %q (%v), want %s's ingress listener %d", svc.Name, v, p.TargetPort.String(), tp, c, err, e.Name, listenerPort(l)))
			}
		}
	}
	if len(b.pdbs) != 1 {
		return errors.Join(append(errs, fmt.Errorf("%s: %d PodDisruptionBudgets, want 1", k8sDir, len(b.pdbs)))...)
	}
	pdb := b.pdbs[0]
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(pod) {
		errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: selector %v does not match the pod labels %v (%v)", pdb.Name, pdb.Spec.Selector, pod, err))
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
		errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: maxUnavailable = %v, want 1", pdb.Name, mu))
	}
	return errors.Join(errs...)
}

func checkRedis(b *bundle) error {
	var errs []error
	svc, ok := b.services["redis"]
	if !ok {
		return fmt.Errorf("%s: no Service redis", k8sDir)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		errs = append(errs, fmt.Errorf("Service redis: clusterIP %q, want None (headless)", svc.Spec.ClusterIP))
	}
	ss, ok := b.statefulSets["redis"]
	if !ok {
		return errors.Join(append(errs, fmt.Errorf("%s: no StatefulSet redis", k8sDir))...)
	}
	if ss.Spec.ServiceName != svc.Name {
		errs = append(errs, fmt.Errorf("StatefulSet redis: serviceName %q, want %q", ss.Spec.ServiceName, svc.Name))
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		errs = append(errs, fmt.Errorf("StatefulSet redis: replicas = %v, want 1", ss.Spec.Replicas))
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ss.Spec.Template.Labels)) {
		errs = append(errs, fmt.Errorf("Service redis: selector %v does not match the StatefulSet's pods %v", svc.Spec.Selector, ss.Spec.Template.Labels))
	}
	return errors.Join(errs...)
}

// kubeVersion is a Kubernetes minor version.
type kubeVersion struct{ major, minor int }

func (v kubeVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// endpointPort is the pod port a Service port sends to, and the container that declares it, as Kubernetes v
// fills the EndpointSlice (podutil.FindPort): a number as it is; a name is looked up in the regular containers,
// and only from 1.32 (kubernetes/kubernetes#127958) then in the native sidecars (init containers with
// restartPolicy: Always), taking the first match. Before 1.32 a name that only a sidecar declares leaves the
// EndpointSlice without ports, and no traffic arrives.
func endpointPort(pod *corev1.PodSpec, sp corev1.ServicePort, v kubeVersion) (int32, string, error) {
	if sp.TargetPort.Type == intstr.Int {
		// The number may be any port of the pod; say whose it is, if a container declares it.
		for _, c := range slices.Concat(pod.Containers, pod.InitContainers) {
			for _, p := range c.Ports {
				if p.ContainerPort == sp.TargetPort.IntVal {
					return p.ContainerPort, c.Name, nil
				}
			}
		}
		return sp.TargetPort.IntVal, "", nil
	}
	proto := func(p corev1.Protocol) corev1.Protocol {
		if p == "" {
			return corev1.ProtocolTCP
		}
		return p
	}
	search := pod.Containers
	if v.major > 1 || v.minor >= 32 {
		for _, c := range pod.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				search = append(slices.Clip(search), c)
			}
		}
	}
	for _, c := range search {
		for _, p := range c.Ports {
			if p.Name == sp.TargetPort.StrVal && proto(p.Protocol) == proto(sp.Protocol) {
				return p.ContainerPort, c.Name, nil
			}
		}
	}
	return 0, "", fmt.Errorf("no container port named %q that Kubernetes %s resolves: the EndpointSlice gets no ports", sp.TargetPort.StrVal, v)
}

// checkPortNames requires container port names to be unique across the pod. Kubernetes allows the same name
// in two containers, but a Service that targets it by name then reaches whichever its version finds first.
func checkPortNames(b *bundle) error {
	var errs []error
	spec := &b.deployment.Spec.Template.Spec
	owner := map[string]string{}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range c.Ports {
			if p.Name == "" {
				continue
			}
			if o, dup := owner[p.Name]; dup {
				errs = append(errs, fmt.Errorf("deployment %s: port name %q in both container %s and %s", b.deployment.Name, p.Name, o, c.Name))
			}
			owner[p.Name] = c.Name
		}
	}
	return errors.Join(errs...)
}

// checkDrain requires the app to outlive Envoy's drain. On deletion the kubelet runs every container's preStop
// hook at once and then stops the regular containers; the native sidecars get SIGTERM only after those have
// exited, in reverse order. So the app's preStop must sleep longer than Envoy's (or Envoy's keep-alive
// connections meet a dead upstream), and the grace period must cover the app's sleep plus the ratelimit
// sidecar's -shutdown-timeout.
func checkDrain(b *bundle) error {
	spec := &b.deployment.Spec.Template.Spec
	_, app := container(spec.Containers, appContainer)
	if app == nil {
		return fmt.Errorf("deployment %s: no container %q", b.deployment.Name, appContainer)
	}
	_, e, err := b.initContainer(envoyContainer)
	if err != nil {
		return err
	}
	_, s, err := b.initContainer(sidecarContainer)
	if err != nil {
		return err
	}
	envoySleep := int64(-1)
	if e.Lifecycle != nil && e.Lifecycle.PreStop != nil && e.Lifecycle.PreStop.Exec != nil {
		if m := regexp.MustCompile(`\bsleep (\d+)\b`).FindStringSubmatch(strings.Join(e.Lifecycle.PreStop.Exec.Command, " ")); m != nil {
			envoySleep, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	if envoySleep < 0 {
		return fmt.Errorf("container %s: no preStop sleep to drain", e.Name)
	}
	if app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.Sleep == nil {
		return fmt.Errorf("container %s: no preStop sleep: the kubelet stops it at once while %s drains for %d s", app.Name, e.Name, envoySleep)
	}
	var errs []error
	appSleep := app.Lifecycle.PreStop.Sleep.Seconds
	if appSleep <= envoySleep {
		errs = append(errs, fmt.Errorf("container %s: preStop sleeps %d s, want longer than %s's drain of %d s", app.Name, appSleep, e.Name, envoySleep))
	}
	shutdown, err := time.ParseDuration(setting(s, "shutdown-timeout", config.DefaultShutdownTimeout.String()))
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("container %s: -shutdown-timeout: %w", s.Name, err))...)
	}
	need := appSleep + int64(shutdown/time.Second)
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= need {
		errs = append(errs, fmt.Errorf("terminationGracePeriodSeconds = %v, want more than the app's preStop sleep %d s plus %s's -shutdown-timeout %v", g, appSleep, s.Name, shutdown))
	}
	return errors.Join(errs...)
}

// overlay is deploy/k8s-client-address: deploy/k8s with Service patches.
type overlay struct {
	kustomization struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	services []*corev1.Service // the patches, each a strategic merge patch of a Service
}

// checkClientAddressOverlay requires the client-address overlay to build on deploy/k8s and to expose the edge
// Service with externalTrafficPolicy: Local, the setting under which kube-proxy keeps the client's address
// (and so the per-client remote_address limit stays per client).
func checkClientAddressOverlay(b *bundle) error {
	k := b.overlay.kustomization
	var errs []error
	if !slices.Equal(k.Resources, []string{"../k8s"}) {
		errs = append(errs, fmt.Errorf("%s: resources %v, want [../k8s] (deploy/k8s as shipped)", overlayDir, k.Resources))
	}
	var edge *corev1.Service
	for _, s := range b.overlay.services {
		if s.Name == b.deployment.Name {
			edge = s
		}
	}
	if edge == nil {
		return errors.Join(append(errs, fmt.Errorf("%s: no patch of Service %s", overlayDir, b.deployment.Name))...)
	}
	if t := edge.Spec.Type; t != corev1.ServiceTypeLoadBalancer && t != corev1.ServiceTypeNodePort {
		errs = append(errs, fmt.Errorf("%s: Service %s type %q, want LoadBalancer or NodePort", overlayDir, edge.Name, t))
	}
	if p := edge.Spec.ExternalTrafficPolicy; p != corev1.ServiceExternalTrafficPolicyLocal {
		errs = append(errs, fmt.Errorf("%s: Service %s externalTrafficPolicy %q, want Local: kube-proxy masquerades Cluster traffic and every client shares one remote_address budget", overlayDir, edge.Name, p))
	}
	return errors.Join(errs...)
}
