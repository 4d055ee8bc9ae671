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
	"flag"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

var update = flag.Bool("update", false, "rewrite the ConfigMaps in deploy/k8s from deploy/envoy.yaml and deploy/rules/edge.yaml")

// Names that tie the files together.
const (
	sidecarContainer = "ratelimit"
	envoyContainer   = "envoy"
	rlsCluster       = "ratelimit"       // Envoy cluster of the rate limit service
	envoyConfigMap   = "envoy-config"    // carries deploy/envoy.yaml
	rulesConfigMap   = "ratelimit-rules" // carries deploy/rules/edge.yaml
	udsSocketPath    = "/var/run/ratelimit/rls.sock"
	appContainer     = "app"
	sidecarGRPCPort  = "rls-grpc" // the sidecar's container port names
	sidecarHTTPPort  = "rls-http"
	livenessPath     = "/healthz" // the sidecar's GET that answers while the process serves, Redis or not
)

// Files, relative to the repository root.
const (
	envoyFile        = "deploy/envoy.yaml"
	envoyUDSFile     = "deploy/envoy-uds.yaml"
	envoyComposeFile = "deploy/envoy-compose.yaml"
	rulesFile        = "deploy/rules/edge.yaml"
	k8sDir           = "deploy/k8s"
	overlayDir       = "deploy/k8s-client-address"
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
	overlay       overlay // deploy/k8s-client-address

	envoyRaw, rulesRaw []byte
	rlqsDoc            []byte                            // docs/rlqs.md, which quotes deploy/envoy-rlqs.yaml
	envoy              map[string]*bootstrapv3.Bootstrap // by file
	rules              *rules.Set                        // rulesRaw, loaded
	compose            compose
	envoyVersion       string // pinned in scripts/envoy.sh
}

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
	b.rlqsDoc = readFile(t, root, rlqsDocFile)
	for _, f := range []string{envoyFile, envoyUDSFile, envoyComposeFile, envoyRLQSFile} {
		bs, err := decodeEnvoy(readFile(t, root, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b.envoy[f] = bs
	}
	if b.rules, err = parseRules(b.rulesRaw); err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(readFile(t, root, composeFile), &b.compose); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	m := envoyVersionRE.FindSubmatch(readFile(t, root, envoyScript))
	if m == nil {
		t.Fatalf("%s: no ENVOY_VERSION=x.y.z line", envoyScript)
	}
	b.envoyVersion = string(m[1])
	if err := decodeStrict(readFile(t, root, overlayDir+"/kustomization.yaml"), &b.overlay.kustomization); err != nil {
		t.Fatalf("%s: %v", overlayDir, err)
	}
	for _, p := range b.overlay.kustomization.Patches {
		var svc corev1.Service
		if err := decodeStrict(readFile(t, root, overlayDir+"/"+p.Path), &svc); err != nil {
			t.Fatalf("%s/%s: %v", overlayDir, p.Path, err)
		}
		b.overlay.services = append(b.overlay.services, &svc)
	}
	return b
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
	{"port names", checkPortNames},
	{"drain", checkDrain},
	{"client address overlay", checkClientAddressOverlay},
	{"redis", checkRedis},
	{"ratelimit filter", checkRateLimitFilter},
	{"descriptor shapes", checkDescriptorShapes},
	{"envoy variants", checkEnvoyVariants},
	{"rlqs filter", checkRLQSFilter},
	{"rlqs doc quotes the file", checkRLQSDoc},
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
