// Package deploy_test checks the deployment files against each other and against the sidecar's contract:
// the Kubernetes manifests (decoded strictly into k8s.io/api types, so a misspelt field fails), the Envoy
// bootstraps (decoded into go-control-plane types, and validated by a real Envoy 1.40), the rules, the
// compose file and the ConfigMaps that must carry deploy/envoy.yaml and deploy/rules/edge.yaml unchanged.
//
// Every check is a function of a parsed bundle of those files. TestDeploy runs them on the repository;
// TestChecksCatchMistakes breaks a fresh bundle in one place per case and requires the check to notice.
//
// After editing deploy/envoy.yaml or deploy/rules/edge.yaml, `go test ./test/deploy -update` rewrites the
// ConfigMaps in deploy/k8s.
package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	// Types that the bootstraps name in typed_config, registered for protojson's Any resolution.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

var update = flag.Bool("update", false, "rewrite the ConfigMaps in deploy/k8s from deploy/envoy.yaml and deploy/rules/edge.yaml")

// The sidecar's contract (cmd/ratelimit-sidecar): flag defaults, and the environment prefix of its flags.
const (
	sidecarGRPCAddrDefault = ":8081"
	sidecarHTTPAddrDefault = ":8080"
	sidecarEnvPrefix       = "RLS_"
)

// Names that tie the files together.
const (
	sidecarContainer = "ratelimit"
	envoyContainer   = "envoy"
	rlsCluster       = "ratelimit"       // Envoy cluster of the rate limit service
	envoyConfigMap   = "envoy-config"    // carries deploy/envoy.yaml
	rulesConfigMap   = "ratelimit-rules" // carries deploy/rules/edge.yaml
	udsSocketPath    = "/var/run/ratelimit/rls.sock"
)

// Files, relative to the repository root.
const (
	envoyFile        = "deploy/envoy.yaml"
	envoyUDSFile     = "deploy/envoy-uds.yaml"
	envoyComposeFile = "deploy/envoy-compose.yaml"
	rulesFile        = "deploy/rules/edge.yaml"
	k8sDir           = "deploy/k8s"
	composeFile      = "docker-compose.yml"
	envoyScript      = "scripts/envoy.sh"
)

// bundle is every deployment file, parsed.
type bundle struct {
	kustomization kustomization
	manifests     []string // file names in k8sDir other than kustomization.yaml
	deployment    *appsv1.Deployment
	services      map[string]*corev1.Service
	configMaps    map[string]*corev1.ConfigMap
	statefulSets  map[string]*appsv1.StatefulSet
	pdbs          []*policyv1.PodDisruptionBudget

	envoyRaw, rulesRaw []byte
	envoy              map[string]*bootstrapv3.Bootstrap // by file
	rules              rules
	compose            compose
	envoyVersion       string // pinned in scripts/envoy.sh
}

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// rules is the part of the rules format these checks need. It is decoded leniently: the sidecar's own
// loader is the strict one, and the rules format is its to extend.
type rules struct {
	Domain      string     `json:"domain"`
	Descriptors []ruleNode `json:"descriptors"`
}

type ruleNode struct {
	Key         string          `json:"key"`
	Value       string          `json:"value"`
	RateLimit   json.RawMessage `json:"rate_limit"`
	Descriptors []ruleNode      `json:"descriptors"`
}

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

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

func readFile(t *testing.T, root, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeStrict converts YAML to JSON (duplicate keys are errors) and decodes it into v, rejecting fields
// that v does not have.
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the document")
	}
	return nil
}

// newObject returns an empty typed object for a manifest's apiVersion and kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	}
	return nil, fmt.Errorf("unknown kind %q of apiVersion %q: add it to newObject", kind, apiVersion)
}

// decodeManifests splits a multi-document YAML file and decodes each document strictly into its typed
// struct. Documents holding only comments are skipped.
func decodeManifests(data []byte) ([]any, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []any
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		obj, err := newObject(tm.APIVersion, tm.Kind)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if err := decodeStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
}

func decodeEnvoy(data []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(j, bs); err != nil {
		return nil, err
	}
	return bs, nil
}

var envoyVersionRE = regexp.MustCompile(`(?m)^ENVOY_VERSION=([0-9.]+)$`)

// load parses every deployment file; a file that does not parse fails the test here.
func load(t *testing.T) *bundle {
	t.Helper()
	root := repoRoot(t)
	b := &bundle{
		services:     map[string]*corev1.Service{},
		configMaps:   map[string]*corev1.ConfigMap{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		envoy:        map[string]*bootstrapv3.Bootstrap{},
	}

	files, err := filepath.Glob(filepath.Join(root, k8sDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		rel := filepath.ToSlash(filepath.Join(k8sDir, name))
		if name == "kustomization.yaml" {
			if err := decodeStrict(readFile(t, root, rel), &b.kustomization); err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			continue
		}
		b.manifests = append(b.manifests, name)
		objs, err := decodeManifests(readFile(t, root, rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *appsv1.Deployment:
				if b.deployment != nil {
					t.Fatalf("%s: a second Deployment %q; the checks expect one", rel, o.Name)
				}
				b.deployment = o
			case *appsv1.StatefulSet:
				b.statefulSets[o.Name] = o
			case *corev1.Service:
				b.services[o.Name] = o
			case *corev1.ConfigMap:
				b.configMaps[o.Name] = o
			case *policyv1.PodDisruptionBudget:
				b.pdbs = append(b.pdbs, o)
			}
		}
	}
	if b.deployment == nil {
		t.Fatalf("%s: no Deployment", k8sDir)
	}

	b.envoyRaw = readFile(t, root, envoyFile)
	b.rulesRaw = readFile(t, root, rulesFile)
	for _, f := range []string{envoyFile, envoyUDSFile, envoyComposeFile} {
		bs, err := decodeEnvoy(readFile(t, root, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b.envoy[f] = bs
	}
	if err := yaml.Unmarshal(b.rulesRaw, &b.rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if err := decodeStrict(readFile(t, root, composeFile), &b.compose); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	m := envoyVersionRE.FindSubmatch(readFile(t, root, envoyScript))
	if m == nil {
		t.Fatalf("%s: no ENVOY_VERSION=x.y.z line", envoyScript)
	}
	b.envoyVersion = string(m[1])
	return b
}

// Helpers over the parsed files.

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
	env := sidecarEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	for _, e := range c.Env {
		if e.Name == env {
			return e.Value
		}
	}
	return def
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

func (b *bundle) cluster(file, name string) (*clusterv3.Cluster, error) {
	for _, c := range b.envoy[file].GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: no cluster %q", file, name)
}

// endpoint is a cluster's only endpoint address.
func endpoint(file string, c *clusterv3.Cluster) (*corev3.Address, error) {
	var addrs []*corev3.Address
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			addrs = append(addrs, lb.GetEndpoint().GetAddress())
		}
	}
	if len(addrs) != 1 {
		return nil, fmt.Errorf("%s: cluster %s has %d endpoints, want 1", file, c.GetName(), len(addrs))
	}
	return addrs[0], nil
}

func hcm(l *listenerv3.Listener) (*hcmv3.HttpConnectionManager, error) {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if f.GetTypedConfig().MessageIs(h) {
				return h, f.GetTypedConfig().UnmarshalTo(h)
			}
		}
	}
	return nil, fmt.Errorf("listener %s: no http_connection_manager", l.GetName())
}

// ingress is the listener whose connection manager runs the ratelimit filter, with that filter's config.
func (b *bundle) ingress(file string) (*listenerv3.Listener, *hcmv3.HttpConnectionManager, *ratelimitfilterv3.RateLimit, error) {
	var found []*listenerv3.Listener
	var hs []*hcmv3.HttpConnectionManager
	var rls []*ratelimitfilterv3.RateLimit
	for _, l := range b.envoy[file].GetStaticResources().GetListeners() {
		h, err := hcm(l)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		for _, f := range h.GetHttpFilters() {
			rl := &ratelimitfilterv3.RateLimit{}
			if f.GetTypedConfig().MessageIs(rl) {
				if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
					return nil, nil, nil, err
				}
				found, hs, rls = append(found, l), append(hs, h), append(rls, rl)
			}
		}
	}
	if len(found) != 1 {
		return nil, nil, nil, fmt.Errorf("%s: %d ratelimit filters, want 1 on one listener", file, len(found))
	}
	return found[0], hs[0], rls[0], nil
}

func listenerPort(l *listenerv3.Listener) uint32 {
	return l.GetAddress().GetSocketAddress().GetPortValue()
}

func (b *bundle) listener(file, name string) (*listenerv3.Listener, error) {
	for _, l := range b.envoy[file].GetStaticResources().GetListeners() {
		if l.GetName() == name {
			return l, nil
		}
	}
	return nil, fmt.Errorf("%s: no listener %q", file, name)
}

// The checks. Each returns every problem it finds.

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
	grpcPort, err := addrPort(setting(s, "grpc-addr", sidecarGRPCAddrDefault))
	if err != nil {
		return fmt.Errorf("container %s: -grpc-addr: %w", s.Name, err)
	}
	httpPort, err := addrPort(setting(s, "http-addr", sidecarHTTPAddrDefault))
	if err != nil {
		return fmt.Errorf("container %s: -http-addr: %w", s.Name, err)
	}
	if p, err := containerPort(s, "grpc"); err != nil || p != grpcPort {
		errs = append(errs, fmt.Errorf("container %s: port grpc = %d (%v), want -grpc-addr's %d", s.Name, p, err, grpcPort))
	}
	if p, err := containerPort(s, "http"); err != nil || p != httpPort {
		errs = append(errs, fmt.Errorf("container %s: port http = %d (%v), want -http-addr's %d", s.Name, p, err, httpPort))
	}
	// Envoy's listeners share the pod's network with the sidecar.
	for _, l := range b.envoy[envoyFile].GetStaticResources().GetListeners() {
		if p := int32(listenerPort(l)); p == httpPort || p == grpcPort {
			errs = append(errs, fmt.Errorf("container %s: port %d is also %s's listener %s in the same pod", s.Name, p, envoyFile, l.GetName()))
		}
	}
	for name, p := range map[string]*corev1.Probe{"startupProbe": s.StartupProbe, "readinessProbe": s.ReadinessProbe, "livenessProbe": s.LivenessProbe} {
		switch {
		case p == nil:
			errs = append(errs, fmt.Errorf("container %s: no %s", s.Name, name))
		case p.GRPC == nil:
			errs = append(errs, fmt.Errorf("container %s: %s is not a gRPC probe", s.Name, name))
		case p.GRPC.Port != grpcPort:
			errs = append(errs, fmt.Errorf("container %s: %s grpc.port = %d, want -grpc-addr's %d", s.Name, name, p.GRPC.Port, grpcPort))
		}
	}
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

func checkConfigMaps(b *bundle) error {
	var errs []error
	for _, want := range []struct {
		cm, key, file string
		content       []byte
	}{
		{envoyConfigMap, "envoy.yaml", envoyFile, b.envoyRaw},
		{rulesConfigMap, filepath.Base(rulesFile), rulesFile, b.rulesRaw},
	} {
		cm, ok := b.configMaps[want.cm]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: no ConfigMap %s", k8sDir, want.cm))
			continue
		}
		if got, ok := cm.Data[want.key]; !ok || got != string(want.content) {
			errs = append(errs, fmt.Errorf("ConfigMap %s: data[%q] differs from %s (run go test ./test/deploy -update)", want.cm, want.key, want.file))
		}
		if len(cm.Data) != 1 || len(cm.BinaryData) != 0 {
			errs = append(errs, fmt.Errorf("ConfigMap %s: %d keys, want only %q", want.cm, len(cm.Data)+len(cm.BinaryData), want.key))
		}
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

// checkRateLimitFilter: the filter's settings, and the cluster it calls. `envoy --mode validate` does not
// notice a cluster_name that names no cluster, so this does.
func checkRateLimitFilter(b *bundle) error {
	var errs []error
	for _, file := range []string{envoyFile, envoyUDSFile, envoyComposeFile} {
		_, h, rl, err := b.ingress(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rl.GetDomain() != b.rules.Domain {
			errs = append(errs, fmt.Errorf("%s: ratelimit domain %q, want %s's %q", file, rl.GetDomain(), rulesFile, b.rules.Domain))
		}
		if rl.GetFailureModeDeny() {
			errs = append(errs, fmt.Errorf("%s: failure_mode_deny is true: a rate limiter outage would fail every request", file))
		}
		if rl.GetRateLimitService().GetTransportApiVersion() != corev3.ApiVersion_V3 {
			errs = append(errs, fmt.Errorf("%s: rate_limit_service transport_api_version %v, want V3", file, rl.GetRateLimitService().GetTransportApiVersion()))
		}
		if rl.GetEnableXRatelimitHeaders() != ratelimitfilterv3.RateLimit_DRAFT_VERSION_03 {
			errs = append(errs, fmt.Errorf("%s: enable_x_ratelimit_headers %v, want DRAFT_VERSION_03", file, rl.GetEnableXRatelimitHeaders()))
		}
		if names := filterNames(h); len(names) == 0 || names[len(names)-1] != "envoy.filters.http.router" {
			errs = append(errs, fmt.Errorf("%s: http_filters %v, want the router last", file, names))
		}
		if !h.GetUseRemoteAddress().GetValue() {
			errs = append(errs, fmt.Errorf("%s: use_remote_address is not set: remote_address would not be the client", file))
		}
		name := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		c, err := b.cluster(file, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("ratelimit filter's cluster: %w", err))
			continue
		}
		if err := checkHTTP2(c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", file, err))
		}
	}
	return errors.Join(errs...)
}

func filterNames(h *hcmv3.HttpConnectionManager) []string {
	var names []string
	for _, f := range h.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	return names
}

func checkHTTP2(c *clusterv3.Cluster) error {
	opts, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		return fmt.Errorf("cluster %s: no HttpProtocolOptions: gRPC needs HTTP/2", c.GetName())
	}
	o := &upstreamhttpv3.HttpProtocolOptions{}
	if err := opts.UnmarshalTo(o); err != nil {
		return fmt.Errorf("cluster %s: %w", c.GetName(), err)
	}
	if o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		return fmt.Errorf("cluster %s: not explicitly HTTP/2: gRPC needs it", c.GetName())
	}
	return nil
}

// checkDescriptorShapes: every descriptor the route can send (each skip_if_absent entry present or not)
// is non-empty and ends on a rule with a rate_limit; a shape the rules do not limit is a typo on one side.
func checkDescriptorShapes(b *bundle) error {
	_, h, _, err := b.ingress(envoyFile)
	if err != nil {
		return err
	}
	var errs []error
	var policies []*routev3.RateLimit
	for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
		policies = append(policies, vh.GetRateLimits()...)
		for _, r := range vh.GetRoutes() {
			policies = append(policies, r.GetRoute().GetRateLimits()...)
		}
	}
	if len(policies) == 0 {
		return fmt.Errorf("%s: no rate_limits on the ingress routes", envoyFile)
	}
	for i, p := range policies {
		shapes, err := descriptorShapes(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: rate_limits[%d]: %w", envoyFile, i, err))
			continue
		}
		for _, keys := range shapes {
			if len(keys) == 0 {
				errs = append(errs, fmt.Errorf("%s: rate_limits[%d] can send a descriptor with no entries (skip_if_absent on its only entries)", envoyFile, i))
			} else if !limited(b.rules.Descriptors, keys) {
				errs = append(errs, fmt.Errorf("%s: rate_limits[%d] can send keys %v, which no rule in %s limits", envoyFile, i, keys, rulesFile))
			}
		}
	}
	return errors.Join(errs...)
}

// descriptorShapes lists the key sequences one rate_limits entry can produce.
func descriptorShapes(p *routev3.RateLimit) ([][]string, error) {
	shapes := [][]string{nil}
	for _, a := range p.GetActions() {
		var key string
		optional := false
		switch {
		case a.GetRequestHeaders() != nil:
			key = a.GetRequestHeaders().GetDescriptorKey()
			optional = a.GetRequestHeaders().GetSkipIfAbsent()
		case a.GetRemoteAddress() != nil:
			key = "remote_address"
		default:
			return nil, fmt.Errorf("action %v: descriptorShapes does not know it yet", a)
		}
		var next [][]string
		for _, s := range shapes {
			next = append(next, append(slices.Clone(s), key))
			if optional {
				next = append(next, s)
			}
		}
		shapes = next
	}
	return shapes, nil
}

// limited reports whether keys, with any values, walk the rules to a node with a rate_limit.
func limited(nodes []ruleNode, keys []string) bool {
	for _, n := range nodes {
		if n.Key != keys[0] || n.Value != "" {
			continue
		}
		if len(keys) == 1 {
			return len(n.RateLimit) > 0 && string(n.RateLimit) != "null"
		}
		return limited(n.Descriptors, keys[1:])
	}
	return false
}

// checkEnvoyVariants: the unix-socket and compose bootstraps differ from deploy/envoy.yaml only in their
// clusters, and those point where the sidecar and compose services are.
func checkEnvoyVariants(b *bundle) error {
	var errs []error
	base := b.envoy[envoyFile]
	for _, file := range []string{envoyUDSFile, envoyComposeFile} {
		v := b.envoy[file]
		if !proto.Equal(v.GetAdmin(), base.GetAdmin()) {
			errs = append(errs, fmt.Errorf("%s: admin differs from %s", file, envoyFile))
		}
		ls, bls := v.GetStaticResources().GetListeners(), base.GetStaticResources().GetListeners()
		if len(ls) != len(bls) {
			errs = append(errs, fmt.Errorf("%s: %d listeners, %s has %d", file, len(ls), envoyFile, len(bls)))
			continue
		}
		for i := range ls {
			if !proto.Equal(ls[i], bls[i]) {
				errs = append(errs, fmt.Errorf("%s: listener %s differs from %s's", file, ls[i].GetName(), envoyFile))
			}
		}
	}
	// Unix socket: the path the sidecar's -grpc-addr unix://... option is documented with.
	if c, err := b.cluster(envoyUDSFile, rlsCluster); err != nil {
		errs = append(errs, err)
	} else if a, err := endpoint(envoyUDSFile, c); err != nil {
		errs = append(errs, err)
	} else if a.GetPipe().GetPath() != udsSocketPath {
		errs = append(errs, fmt.Errorf("%s: cluster %s at %v, want pipe %s", envoyUDSFile, rlsCluster, a, udsSocketPath))
	}
	// Compose: clusters name compose services, on their ports.
	for cluster, want := range map[string]struct {
		service string
		port    string
	}{
		rlsCluster: {"ratelimit", sidecarGRPCAddrDefault},
		"app":      {"upstream", ":8000"},
	} {
		c, err := b.cluster(envoyComposeFile, cluster)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a, err := endpoint(envoyComposeFile, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sa := a.GetSocketAddress()
		port, _ := addrPort(want.port)
		if sa.GetAddress() != want.service || int32(sa.GetPortValue()) != port {
			errs = append(errs, fmt.Errorf("%s: cluster %s at %s:%d, want compose service %s:%d", envoyComposeFile, cluster, sa.GetAddress(), sa.GetPortValue(), want.service, port))
		}
		if _, ok := b.compose.Services[want.service]; !ok {
			errs = append(errs, fmt.Errorf("%s: no service %s for cluster %s", composeFile, want.service, cluster))
		}
		if c.GetType() != clusterv3.Cluster_STRICT_DNS {
			errs = append(errs, fmt.Errorf("%s: cluster %s is %v, want STRICT_DNS to resolve a compose service", envoyComposeFile, cluster, c.GetType()))
		}
	}
	return errors.Join(errs...)
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

var checks = []struct {
	name  string
	check func(*bundle) error
}{
	{"kustomization", checkKustomization},
	{"sidecar order", checkSidecarOrder},
	{"sidecar ports", checkSidecarPorts},
	{"sidecar rules mount", checkSidecarRulesMount},
	{"sidecar hardening", checkSidecarHardening},
	{"redis url", checkRedisURL},
	{"configmaps", checkConfigMaps},
	{"envoy container", checkEnvoyContainer},
	{"service and pdb", checkServiceAndPDB},
	{"redis", checkRedis},
	{"ratelimit filter", checkRateLimitFilter},
	{"descriptor shapes", checkDescriptorShapes},
	{"envoy variants", checkEnvoyVariants},
	{"compose", checkCompose},
}

func TestDeploy(t *testing.T) {
	if *update {
		updateConfigMaps(t)
	}
	b := load(t)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(b); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestChecksCatchMistakes makes one plausible mistake per case in a fresh bundle and requires the named
// check to report it, so no check passes vacuously.
func TestChecksCatchMistakes(t *testing.T) {
	sidecar := func(b *bundle) *corev1.Container { _, c, _ := b.initContainer(sidecarContainer); return c }
	envoy := func(b *bundle) *corev1.Container { _, c, _ := b.initContainer(envoyContainer); return c }
	rlFilter := func(b *bundle, file string, edit func(*ratelimitfilterv3.RateLimit)) {
		l, h, rl, err := b.ingress(file)
		if err != nil {
			t.Fatal(err)
		}
		edit(rl)
		for _, f := range h.GetHttpFilters() {
			if f.GetTypedConfig().MessageIs(rl) {
				if err := f.GetTypedConfig().MarshalFrom(rl); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetTypedConfig().MessageIs(h) {
					if err := f.GetTypedConfig().MarshalFrom(h); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	routeActions := func(b *bundle, edit func([]*routev3.RateLimit)) {
		l, h, _, err := b.ingress(envoyFile)
		if err != nil {
			t.Fatal(err)
		}
		edit(h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits())
		if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().MarshalFrom(h); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		check  func(*bundle) error
		mutate func(*bundle)
	}{
		{"manifest missing from kustomization", checkKustomization, func(b *bundle) {
			b.kustomization.Resources = b.kustomization.Resources[1:]
		}},
		{"envoy listed before the sidecar", checkSidecarOrder, func(b *bundle) {
			ics := b.deployment.Spec.Template.Spec.InitContainers
			slices.Reverse(ics)
		}},
		{"sidecar is a plain init container", checkSidecarOrder, func(b *bundle) { sidecar(b).RestartPolicy = nil }},
		{"sidecar without startup probe", checkSidecarOrder, func(b *bundle) { sidecar(b).StartupProbe = nil }},
		{"grpc containerPort off", checkSidecarPorts, func(b *bundle) { sidecar(b).Ports[0].ContainerPort = 9090 }},
		{"grpc-addr moved by flag", checkSidecarPorts, func(b *bundle) {
			sidecar(b).Args = append(sidecar(b).Args, "-grpc-addr", ":9090")
		}},
		{"grpc-addr moved by env", checkSidecarPorts, func(b *bundle) {
			sidecar(b).Env = append(sidecar(b).Env, corev1.EnvVar{Name: "RLS_GRPC_ADDR", Value: ":9090"})
		}},
		{"liveness probe on another port", checkSidecarPorts, func(b *bundle) { sidecar(b).LivenessProbe.GRPC.Port = 8082 }},
		{"http port off", checkSidecarPorts, func(b *bundle) { sidecar(b).Args = append(sidecar(b).Args, "-http-addr=:9000") }},
		{"http port on envoy's", checkSidecarPorts, func(b *bundle) {
			sidecar(b).Args = append(sidecar(b).Args, "-http-addr=:8080")
			sidecar(b).Ports[1].ContainerPort = 8080
		}},
		{"envoy dials another port", checkSidecarPorts, func(b *bundle) {
			c, _ := b.cluster(envoyFile, rlsCluster)
			a, _ := endpoint(envoyFile, c)
			a.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 18081}
		}},
		{"rules via subPath", checkSidecarRulesMount, func(b *bundle) { sidecar(b).VolumeMounts[0].SubPath = "edge.yaml" }},
		{"rules mounted elsewhere", checkSidecarRulesMount, func(b *bundle) { sidecar(b).VolumeMounts[0].MountPath = "/rules" }},
		{"config flag elsewhere", checkSidecarRulesMount, func(b *bundle) { sidecar(b).Args[1] = "/etc/ratelimit" }},
		{"no memory limit", checkSidecarHardening, func(b *bundle) { delete(sidecar(b).Resources.Limits, corev1.ResourceMemory) }},
		{"writable root filesystem", checkSidecarHardening, func(b *bundle) { sidecar(b).SecurityContext.ReadOnlyRootFilesystem = nil }},
		{"redis host unknown", checkRedisURL, func(b *bundle) { sidecar(b).Env[0].Value = "redis://redis-master:6379/0" }},
		{"envoy.yaml edited, ConfigMap not", checkConfigMaps, func(b *bundle) { b.envoyRaw = append(b.envoyRaw, "# edit\n"...) }},
		{"rules edited, ConfigMap not", checkConfigMaps, func(b *bundle) { b.rulesRaw = bytes.Replace(b.rulesRaw, []byte("100"), []byte("101"), 1) }},
		{"envoy image drifts", checkEnvoyContainer, func(b *bundle) { envoy(b).Image = "envoyproxy/envoy:v1.39.0" }},
		{"envoy config path wrong", checkEnvoyContainer, func(b *bundle) { envoy(b).Args[1] = "/etc/envoy.yaml" }},
		{"readiness on the ingress port", checkEnvoyContainer, func(b *bundle) { envoy(b).ReadinessProbe.HTTPGet.Port = intstr.FromString("http") }},
		{"preStop sleeps past the grace period", checkEnvoyContainer, func(b *bundle) {
			g := int64(10)
			b.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}},
		{"admin moved", checkEnvoyContainer, func(b *bundle) {
			b.envoy[envoyFile].GetAdmin().GetAddress().GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 9902}
		}},
		{"service targets the app", checkServiceAndPDB, func(b *bundle) {
			b.services[b.deployment.Name].Spec.Ports[0].TargetPort = intstr.FromInt32(8000)
		}},
		{"pdb selects nothing", checkServiceAndPDB, func(b *bundle) {
			b.pdbs[0].Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": "other"}
		}},
		{"pod labels renamed", checkServiceAndPDB, func(b *bundle) {
			b.deployment.Spec.Template.Labels = map[string]string{"app": "edge"}
		}},
		{"redis not headless", checkRedis, func(b *bundle) { b.services["redis"].Spec.ClusterIP = "" }},
		{"domain differs from rules", checkRateLimitFilter, func(b *bundle) { b.rules.Domain = "other" }},
		{"filter names a missing cluster", checkRateLimitFilter, func(b *bundle) {
			rlFilter(b, envoyUDSFile, func(rl *ratelimitfilterv3.RateLimit) {
				rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().ClusterName = "rls"
			})
		}},
		{"fail closed", checkRateLimitFilter, func(b *bundle) {
			rlFilter(b, envoyFile, func(rl *ratelimitfilterv3.RateLimit) { rl.FailureModeDeny = true })
		}},
		{"rls cluster speaks HTTP/1.1", checkRateLimitFilter, func(b *bundle) {
			c, _ := b.cluster(envoyComposeFile, rlsCluster)
			c.TypedExtensionProtocolOptions = nil
		}},
		{"skip_if_absent leaves an empty descriptor", checkDescriptorShapes, func(b *bundle) {
			routeActions(b, func(rls []*routev3.RateLimit) {
				rls[0].GetActions()[0].GetRequestHeaders().SkipIfAbsent = true
			})
		}},
		{"skip_if_absent leaves a bare path", checkDescriptorShapes, func(b *bundle) {
			routeActions(b, func(rls []*routev3.RateLimit) {
				rls[2].GetActions()[0].GetRequestHeaders().SkipIfAbsent = true
			})
		}},
		{"descriptor key misspelt", checkDescriptorShapes, func(b *bundle) {
			routeActions(b, func(rls []*routev3.RateLimit) {
				rls[0].GetActions()[0].GetRequestHeaders().DescriptorKey = "apikey"
			})
		}},
		{"rule without a limit", checkDescriptorShapes, func(b *bundle) { b.rules.Descriptors[0].Descriptors[0].RateLimit = nil }},
		{"uds listener drifts", checkEnvoyVariants, func(b *bundle) {
			b.envoy[envoyUDSFile].GetStaticResources().GetListeners()[0].Name = "other"
		}},
		{"uds socket path", checkEnvoyVariants, func(b *bundle) {
			c, _ := b.cluster(envoyUDSFile, rlsCluster)
			a, _ := endpoint(envoyUDSFile, c)
			a.GetPipe().Path = "/tmp/rls.sock"
		}},
		{"compose service renamed", checkEnvoyVariants, func(b *bundle) {
			b.compose.Services["rls"] = b.compose.Services["ratelimit"]
			delete(b.compose.Services, "ratelimit")
		}},
		{"compose envoy mounts the pod config", checkCompose, func(b *bundle) {
			s := b.compose.Services["envoy"]
			s.Volumes = []string{"./" + envoyFile + ":/etc/envoy/envoy.yaml:ro"}
			b.compose.Services["envoy"] = s
		}},
		{"compose rules elsewhere", checkCompose, func(b *bundle) {
			s := b.compose.Services["ratelimit"]
			s.Environment = map[string]string{"RLS_CONFIG": "/rules", "RLS_REDIS_URL": s.Environment["RLS_REDIS_URL"]}
			b.compose.Services["ratelimit"] = s
		}},
		{"compose port unpublished", checkCompose, func(b *bundle) {
			s := b.compose.Services["envoy"]
			s.Ports = []string{"8000:8000"}
			b.compose.Services["envoy"] = s
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := load(t)
			if err := tt.check(b); err != nil {
				t.Fatalf("before the mistake: %v", err)
			}
			tt.mutate(b)
			if err := tt.check(b); err == nil {
				t.Error("check passed after the mistake, want an error")
			} else {
				t.Logf("reported: %v", err)
			}
		})
	}
}

func TestDecodeManifestsStrict(t *testing.T) {
	tests := []struct {
		name, doc string
	}{
		{"misspelt field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {slector: {a: b}}\n"},
		{"unknown kind", "apiVersion: v1\nkind: Servce\nmetadata: {name: x}\n"},
		{"wrong apiVersion", "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: x}\n"},
		{"duplicate key", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n"},
		{"bad second document", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: v1\nkind: ConfigMap\nmetdata: {name: y}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if objs, err := decodeManifests([]byte(tt.doc)); err == nil {
				t.Errorf("decodeManifests(%q) = %d objects, nil error; want an error", tt.doc, len(objs))
			}
		})
	}
	objs, err := decodeManifests([]byte("# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n"))
	if err != nil || len(objs) != 1 {
		t.Errorf("decodeManifests(comment, ConfigMap) = %d objects, %v; want 1, nil", len(objs), err)
	}
}

// envoyBinary installs Envoy through scripts/envoy.sh when missing and returns its path.
func envoyBinary(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("bash", envoyScript)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", envoyScript, err, stderr.Bytes())
	}
	path := strings.TrimSpace(string(out))
	if strings.Contains(path, "\n") || !filepath.IsAbs(path) {
		t.Fatalf("%s printed %q, want one absolute path", envoyScript, out)
	}
	return path
}

// envoyConfigs lists every Envoy config in the repository: deploy/envoy*.yaml and test/**/envoy*.yaml.
func envoyConfigs(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "envoy*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(root, "test"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), "envoy") && strings.HasSuffix(d.Name(), ".yaml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func envoyValidate(envoy, file string) ([]byte, error) {
	return exec.Command(envoy, "--mode", "validate", "-c", file).CombinedOutput()
}

func TestEnvoyValidates(t *testing.T) {
	root := repoRoot(t)
	envoy := envoyBinary(t, root)

	out, err := exec.Command(envoy, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", envoy, err, out)
	}
	b := load(t)
	if !strings.Contains(string(out), "/"+b.envoyVersion+"/") {
		t.Errorf("%s --version = %q, want version %s", envoy, bytes.TrimSpace(out), b.envoyVersion)
	}

	files := envoyConfigs(t, root)
	if len(files) < 3 {
		t.Fatalf("found Envoy configs %v, want at least %s, %s and %s", files, envoyFile, envoyUDSFile, envoyComposeFile)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			t.Parallel()
			if out, err := envoyValidate(envoy, f); err != nil {
				t.Errorf("envoy --mode validate -c %s: %v\n%s", rel, err, out)
			}
		})
	}

	// The validator must be able to say no: Envoy's YAML rejects a duration of "20ms".
	t.Run("rejects a bad config", func(t *testing.T) {
		t.Parallel()
		bad := bytes.Replace(b.envoyRaw, []byte("timeout: 0.02s"), []byte("timeout: 20ms"), 1)
		if bytes.Equal(bad, b.envoyRaw) {
			t.Fatalf("%s has no `timeout: 0.02s` to break", envoyFile)
		}
		f := filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(f, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := envoyValidate(envoy, f); err == nil {
			t.Errorf("envoy --mode validate accepted timeout: 20ms\n%s", out)
		}
	})
}

// updateConfigMaps writes the ConfigMaps that carry deploy/envoy.yaml and deploy/rules/edge.yaml.
func updateConfigMaps(t *testing.T) {
	root := repoRoot(t)
	for _, cm := range []struct {
		name, key, src, dst string
	}{
		{envoyConfigMap, "envoy.yaml", envoyFile, "envoy-config.yaml"},
		{rulesConfigMap, filepath.Base(rulesFile), rulesFile, "ratelimit-rules.yaml"},
	} {
		content := readFile(t, root, cm.src)
		if !bytes.HasSuffix(content, []byte("\n")) || bytes.HasSuffix(content, []byte("\n\n")) || bytes.HasPrefix(content, []byte(" ")) {
			t.Fatalf("%s: must end in exactly one newline and not start with a space to fit a YAML block scalar", cm.src)
		}
		var out bytes.Buffer
		fmt.Fprintf(&out, "# %s as a ConfigMap, byte for byte. Do not edit: edit %s, then run\n", cm.src, cm.src)
		fmt.Fprintf(&out, "#   go test ./test/deploy -update\n# (test/deploy fails while the two differ).\n")
		fmt.Fprintf(&out, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: edge\ndata:\n  %s: |\n", cm.name, cm.key)
		for line := range strings.Lines(string(content)) {
			if strings.TrimSpace(line) == "" {
				out.WriteString("\n")
				continue
			}
			out.WriteString("    " + line)
		}
		if err := os.WriteFile(filepath.Join(root, k8sDir, cm.dst), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
