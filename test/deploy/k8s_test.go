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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
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
		tp, err := resolvePort(e, p.TargetPort)
		if err != nil || uint32(tp) != listenerPort(l) {
			errs = append(errs, fmt.Errorf("Service %s: targetPort %s is %d in container %s (%v), want the ingress listener's %d", svc.Name, p.TargetPort.String(), tp, e.Name, err, listenerPort(l)))
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
