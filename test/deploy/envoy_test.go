package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

// Checks of the Envoy bootstraps (deploy/envoy*.yaml), and their validation by a real Envoy.

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
		if b.rules.Domain(rl.GetDomain()) == nil {
			errs = append(errs, fmt.Errorf("%s: ratelimit domain %q, want one of %s's %q", file, rl.GetDomain(), rulesFile, b.rules.Domains()))
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
		rlsCluster: {"ratelimit", config.DefaultGRPCAddr},
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
