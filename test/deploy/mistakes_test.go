package deploy_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestChecksCatchMistakes: each check must notice a plausible mistake, so none passes vacuously.

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
	// rlqsFilter edits the RLQS bootstrap's filter config in place.
	rlqsFilter := func(b *bundle, edit func(*rlqsfilterv3.RateLimitQuotaFilterConfig)) {
		l, err := b.listener(envoyRLQSFile, "ingress")
		if err != nil {
			t.Fatal(err)
		}
		h, err := hcm(l)
		if err != nil {
			t.Fatal(err)
		}
		f := &rlqsfilterv3.RateLimitQuotaFilterConfig{}
		for _, hf := range h.GetHttpFilters() {
			if hf.GetTypedConfig().MessageIs(f) {
				if err := hf.GetTypedConfig().UnmarshalTo(f); err != nil {
					t.Fatal(err)
				}
				edit(f)
				if err := hf.GetTypedConfig().MarshalFrom(f); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().MarshalFrom(h); err != nil {
			t.Fatal(err)
		}
	}
	// rlqsBucket edits the settings of the RLQS filter's first bucket matcher.
	rlqsBucket := func(b *bundle, edit func(*rlqsfilterv3.RateLimitQuotaBucketSettings)) {
		rlqsFilter(b, func(f *rlqsfilterv3.RateLimitQuotaFilterConfig) {
			a := f.GetBucketMatchers().GetMatcherList().GetMatchers()[0].GetOnMatch().GetAction().GetTypedConfig()
			s := &rlqsfilterv3.RateLimitQuotaBucketSettings{}
			if err := a.UnmarshalTo(s); err != nil {
				t.Fatal(err)
			}
			edit(s)
			if err := a.MarshalFrom(s); err != nil {
				t.Fatal(err)
			}
		})
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
	// editRules replaces old in the rules file, which must contain it, and loads the result.
	editRules := func(b *bundle, old, new string) {
		raw := bytes.Replace(b.rulesRaw, []byte(old), []byte(new), 1)
		if bytes.Equal(raw, b.rulesRaw) {
			t.Fatalf("%s has no %q to edit", rulesFile, old)
		}
		var err error
		if b.rules, err = parseRules(raw); err != nil {
			t.Fatal(err)
		}
		b.rulesRaw = raw
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
		{"liveness probe on another port", checkSidecarPorts, func(b *bundle) { sidecar(b).LivenessProbe.HTTPGet.Port = intstr.FromInt32(8081) }},
		{"liveness probe follows redis", checkSidecarPorts, func(b *bundle) {
			sidecar(b).LivenessProbe.HTTPGet = nil
			sidecar(b).LivenessProbe.GRPC = &corev1.GRPCAction{Port: 8081}
		}},
		{"readiness probe follows redis", checkSidecarPorts, func(b *bundle) {
			sidecar(b).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString(sidecarHTTPPort)}}}
		}},
		{"no liveness probe", checkSidecarPorts, func(b *bundle) { sidecar(b).LivenessProbe = nil }},
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
		{"readiness on the ingress port", checkEnvoyContainer, func(b *bundle) { envoy(b).ReadinessProbe.HTTPGet.Port = intstr.FromString("envoy-http") }},
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
		{"service targets a sidecar's port by name", checkServiceAndPDB, func(b *bundle) {
			// Resolves on 1.32+, but before 1.32 the EndpointSlice has no ports.
			b.services[b.deployment.Name].Spec.Ports[0].TargetPort = intstr.FromString("envoy-http")
		}},
		{"service's port name also the sidecar's", checkServiceAndPDB, func(b *bundle) {
			// The shape the first real run found: 1.32+ picks the ratelimit sidecar's port.
			sidecar(b).Ports[1].Name = "http"
			envoy(b).Ports[0].Name = "http"
			b.services[b.deployment.Name].Spec.Ports[0].TargetPort = intstr.FromString("http")
		}},
		{"overlay keeps the cluster policy", checkClientAddressOverlay, func(b *bundle) {
			b.overlay.services[0].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}},
		{"port name in two containers", checkPortNames, func(b *bundle) { sidecar(b).Ports[1].Name = envoy(b).Ports[0].Name }},
		{"app stops at once", checkDrain, func(b *bundle) {
			_, app := container(b.deployment.Spec.Template.Spec.Containers, appContainer)
			app.Lifecycle = nil
		}},
		{"app stops before envoy drained", checkDrain, func(b *bundle) {
			_, app := container(b.deployment.Spec.Template.Spec.Containers, appContainer)
			app.Lifecycle.PreStop.Sleep.Seconds = 10
		}},
		{"grace period shorter than the app's drain", checkDrain, func(b *bundle) {
			g := int64(25)
			b.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}},
		{"pdb selects nothing", checkServiceAndPDB, func(b *bundle) {
			b.pdbs[0].Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": "other"}
		}},
		{"pod labels renamed", checkServiceAndPDB, func(b *bundle) {
			b.deployment.Spec.Template.Labels = map[string]string{"app": "edge"}
		}},
		{"redis not headless", checkRedis, func(b *bundle) { b.services["redis"].Spec.ClusterIP = "" }},
		{"domain differs from rules", checkRateLimitFilter, func(b *bundle) { editRules(b, "domain: edge", "domain: other") }},
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
		{"rule without a limit", checkDescriptorShapes, func(b *bundle) {
			editRules(b, "rate_limit: {unit: minute, requests_per_unit: 20}", "rate_limit: {unlimited: true}")
		}},
		{"rlqs domain misspelt", checkRLQSFilter, func(b *bundle) {
			rlqsFilter(b, func(f *rlqsfilterv3.RateLimitQuotaFilterConfig) { f.Domain = "egde" })
		}},
		{"rlqs bucket key misspelt", checkRLQSFilter, func(b *bundle) {
			rlqsBucket(b, func(s *rlqsfilterv3.RateLimitQuotaBucketSettings) {
				m := s.GetBucketIdBuilder().GetBucketIdBuilder()
				m["apikey"] = m["api_key"]
				delete(m, "api_key")
			})
		}},
		{"rlqs sub-second fill interval", checkRLQSFilter, func(b *bundle) {
			rlqsBucket(b, func(s *rlqsfilterv3.RateLimitQuotaBucketSettings) {
				s.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetTokenBucket().FillInterval = durationpb.New(500 * time.Millisecond)
			})
		}},
		{"rlqs fallback without timeout", checkRLQSFilter, func(b *bundle) {
			rlqsBucket(b, func(s *rlqsfilterv3.RateLimitQuotaBucketSettings) {
				s.GetExpiredAssignmentBehavior().ExpiredAssignmentBehaviorTimeout = nil
			})
		}},
		{"rlqs fails closed", checkRLQSFilter, func(b *bundle) {
			rlqsBucket(b, func(s *rlqsfilterv3.RateLimitQuotaBucketSettings) {
				s.GetNoAssignmentBehavior().GetFallbackRateLimit().Strategy = &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}
			})
		}},
		{"rlqs cluster on another port", checkRLQSFilter, func(b *bundle) {
			c, _ := b.cluster(envoyRLQSFile, rlsCluster)
			a, _ := endpoint(envoyRLQSFile, c)
			a.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 18081}
		}},
		{"rlqs doc drifts from the file", checkRLQSDoc, func(b *bundle) {
			old := []byte("expired_assignment_behavior_timeout: 3600s")
			if !bytes.Contains(b.rlqsDoc, old) {
				t.Fatalf("%s has no %s to edit", rlqsDocFile, old)
			}
			b.rlqsDoc = bytes.Replace(b.rlqsDoc, old, []byte("expired_assignment_behavior_timeout: 600s"), 1)
		}},
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
