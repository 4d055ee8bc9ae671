package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3" // the matcher inputs, for decoding
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

// Checks of deploy/envoy-rlqs.yaml, the bootstrap with the rate_limit_quota (RLQS) filter. `envoy --mode
// validate` (TestEnvoyValidates) accepts it; these catch what Envoy accepts but gets wrong at run time.

const (
	envoyRLQSFile = "deploy/envoy-rlqs.yaml"
	rlqsDocFile   = "docs/rlqs.md"
)

// rlqsFilter is the ingress listener's only rate_limit_quota filter config.
func (b *bundle) rlqsFilter() (*rlqsfilterv3.RateLimitQuotaFilterConfig, error) {
	var found []*rlqsfilterv3.RateLimitQuotaFilterConfig
	l, err := b.listener(envoyRLQSFile, "ingress")
	if err != nil {
		return nil, err
	}
	h, err := hcm(l)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envoyRLQSFile, err)
	}
	for _, f := range h.GetHttpFilters() {
		c := &rlqsfilterv3.RateLimitQuotaFilterConfig{}
		if f.GetTypedConfig().MessageIs(c) {
			if err := f.GetTypedConfig().UnmarshalTo(c); err != nil {
				return nil, err
			}
			found = append(found, c)
		}
	}
	if names := filterNames(h); len(names) == 0 || names[len(names)-1] != "envoy.filters.http.router" {
		return nil, fmt.Errorf("%s: http_filters %v, want the router last", envoyRLQSFile, names)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: %d rate_limit_quota filters on the ingress listener, want 1", envoyRLQSFile, len(found))
	}
	return found[0], nil
}

// bucketSettings lists the actions of every branch of m, in order (matcher_list, nested matchers,
// on_no_match).
func bucketSettings(m *xdsmatcherv3.Matcher) ([]*rlqsfilterv3.RateLimitQuotaBucketSettings, error) {
	if m == nil {
		return nil, nil
	}
	if m.GetMatcherTree() != nil {
		return nil, errors.New("bucket_matchers: bucketSettings does not walk a matcher_tree yet")
	}
	var out []*rlqsfilterv3.RateLimitQuotaBucketSettings
	onMatch := func(om *xdsmatcherv3.Matcher_OnMatch) error {
		if om == nil {
			return nil
		}
		if om.GetMatcher() != nil {
			s, err := bucketSettings(om.GetMatcher())
			out = append(out, s...)
			return err
		}
		s := &rlqsfilterv3.RateLimitQuotaBucketSettings{}
		if err := om.GetAction().GetTypedConfig().UnmarshalTo(s); err != nil {
			return fmt.Errorf("bucket_matchers action %q: %w", om.GetAction().GetName(), err)
		}
		out = append(out, s)
		return nil
	}
	for _, fm := range m.GetMatcherList().GetMatchers() {
		if err := onMatch(fm.GetOnMatch()); err != nil {
			return out, err
		}
	}
	return out, onMatch(m.GetOnNoMatch())
}

// limitedBucket reports whether a bucket with keys, whatever their values, gets a limit from the rules of
// domain, as the sidecar's RLQS server matches a bucket_id.
func limitedBucket(b *bundle, domain string, keys []string) bool {
	bucket := map[string]string{}
	for _, k := range keys {
		bucket[k] = "any"
	}
	limits, _ := b.rules.Domain(domain).MatchBucket(bucket)
	return len(limits) > 0
}

// checkTokenBucket: what Envoy 1.40 does with a token bucket it is given. Its rate is tokens_per_fill over the
// fill interval's whole seconds, so a sub-second interval divides by zero and allows everything; and its
// "unchanged" test compares only the interval's nanos.
func checkTokenBucket(where string, s *typev3.RateLimitStrategy) error {
	tb := s.GetTokenBucket()
	if tb == nil {
		return nil
	}
	fi := tb.GetFillInterval()
	if fi.GetSeconds() < 1 || fi.GetNanos() != 0 {
		return fmt.Errorf("%s: token_bucket fill_interval %v, want whole seconds >= 1s (Envoy 1.40 divides by the seconds alone)", where, fi.AsDuration())
	}
	if tb.GetTokensPerFill().GetValue() == 0 || tb.GetMaxTokens() == 0 {
		return fmt.Errorf("%s: token_bucket %v admits nothing", where, tb)
	}
	return nil
}

// checkRLQSFilter: the RLQS bootstrap is deploy/envoy.yaml with the rate_limit_quota filter in place of the
// ratelimit filter; its domain and every bucket it builds land on a limit in deploy/rules/edge.yaml; its
// cluster is the sidecar's gRPC port over HTTP/2; and its fallbacks are ones Envoy 1.40 applies as meant.
func checkRLQSFilter(b *bundle) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(envoyRLQSFile+": "+format, args...)) }
	f, err := b.rlqsFilter()
	if err != nil {
		return err
	}
	if b.rules.Domain(f.GetDomain()) == nil {
		add("domain %q, want one of %s's %q", f.GetDomain(), rulesFile, b.rules.Domains())
	}

	// The cluster: the same sidecar and port as deploy/envoy.yaml's ShouldRateLimit cluster.
	name := f.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	if c, err := b.cluster(envoyRLQSFile, name); err != nil {
		add("rlqs_server: %v", err)
	} else {
		if err := checkHTTP2(c); err != nil {
			add("%v", err)
		}
		port, _ := addrPort(config.DefaultGRPCAddr)
		if a, err := endpoint(envoyRLQSFile, c); err != nil {
			add("%v", err)
		} else if sa := a.GetSocketAddress(); sa.GetAddress() != "127.0.0.1" || int32(sa.GetPortValue()) != port {
			add("cluster %s at %v, want the sidecar's gRPC port 127.0.0.1:%d", name, a, port)
		}
	}

	settings, err := bucketSettings(f.GetBucketMatchers())
	if err != nil {
		add("%v", err)
	}
	if len(settings) == 0 {
		add("no bucket_matchers action: no request would be limited")
	}
	for i, s := range settings {
		keys := slices.Sorted(maps.Keys(s.GetBucketIdBuilder().GetBucketIdBuilder()))
		if len(keys) == 0 {
			add("bucket %d: empty bucket_id_builder", i)
		} else if !limitedBucket(b, f.GetDomain(), keys) {
			add("bucket %d has keys %v, which no rule in %s limits", i, keys, rulesFile)
		}
		// Fail open before the first assignment, as deploy/envoy.yaml's failure_mode_deny: false.
		if s.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
			add("bucket %d: no_assignment_behavior %v, want ALLOW_ALL: DENY_ALL refuses each new key's first request and everything while no sidecar answers", i, s.GetNoAssignmentBehavior())
		}
		if err := checkTokenBucket(fmt.Sprintf("bucket %d no_assignment_behavior", i), s.GetNoAssignmentBehavior().GetFallbackRateLimit()); err != nil {
			add("%v", err)
		}
		eb := s.GetExpiredAssignmentBehavior()
		if eb.GetReuseLastAssignment() != nil {
			add("bucket %d: reuse_last_assignment, which Envoy 1.40 does not implement (the bucket falls back to no_assignment_behavior)", i)
		}
		if fb := eb.GetFallbackRateLimit(); fb != nil {
			if err := checkTokenBucket(fmt.Sprintf("bucket %d expired_assignment_behavior", i), fb); err != nil {
				add("%v", err)
			}
			if eb.GetExpiredAssignmentBehaviorTimeout().AsDuration() <= 0 {
				add("bucket %d: expired_assignment_behavior without expired_assignment_behavior_timeout: Envoy 1.40 ends the fallback at once", i)
			}
		}
	}

	// A drop-in for deploy/envoy.yaml: the same admin, health listener, app cluster and ingress address.
	base := b.envoy[envoyFile]
	if !proto.Equal(b.envoy[envoyRLQSFile].GetAdmin(), base.GetAdmin()) {
		add("admin differs from %s", envoyFile)
	}
	for _, ln := range []string{"ingress", "health"} {
		l, err1 := b.listener(envoyRLQSFile, ln)
		bl, err2 := b.listener(envoyFile, ln)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, err)
			continue
		}
		if ln == "health" && !proto.Equal(l, bl) || !proto.Equal(l.GetAddress(), bl.GetAddress()) {
			add("listener %s differs from %s's", ln, envoyFile)
		}
	}
	c, err1 := b.cluster(envoyRLQSFile, "app")
	bc, err2 := b.cluster(envoyFile, "app")
	if err := errors.Join(err1, err2); err != nil {
		errs = append(errs, err)
	} else if !proto.Equal(c, bc) {
		add("cluster app differs from %s's", envoyFile)
	}
	return errors.Join(errs...)
}

// checkRLQSDoc: the YAML that docs/rlqs.md's "Envoy config" section explains is deploy/envoy-rlqs.yaml's, as
// protos (the doc shortens the comments): its http_filters are the ingress listener's, its clusters the file's
// clusters of the same names.
func checkRLQSDoc(b *bundle) error {
	_, section, ok := strings.Cut(string(b.rlqsDoc), "\n## Envoy config\n")
	if !ok {
		return fmt.Errorf("%s: no \"## Envoy config\" section", rlqsDocFile)
	}
	_, block, ok := strings.Cut(section, "\n```yaml\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		return fmt.Errorf("%s: \"Envoy config\" has no ```yaml block", rlqsDocFile)
	}
	j, err := yaml.YAMLToJSONStrict([]byte(block))
	if err != nil {
		return fmt.Errorf("%s: Envoy config block: %w", rlqsDocFile, err)
	}
	var parts struct {
		HTTPFilters json.RawMessage `json:"http_filters"`
		Clusters    json.RawMessage `json:"clusters"`
	}
	if err := json.Unmarshal(j, &parts); err != nil {
		return fmt.Errorf("%s: Envoy config block: %w", rlqsDocFile, err)
	}
	doc := &hcmv3.HttpConnectionManager{}
	if err := protojson.Unmarshal([]byte(`{"http_filters":`+string(parts.HTTPFilters)+`}`), doc); err != nil {
		return fmt.Errorf("%s: Envoy config block's http_filters: %w", rlqsDocFile, err)
	}
	docClusters := &bootstrapv3.Bootstrap_StaticResources{}
	if err := protojson.Unmarshal([]byte(`{"clusters":`+string(parts.Clusters)+`}`), docClusters); err != nil {
		return fmt.Errorf("%s: Envoy config block's clusters: %w", rlqsDocFile, err)
	}
	l, err := b.listener(envoyRLQSFile, "ingress")
	if err != nil {
		return err
	}
	h, err := hcm(l)
	if err != nil {
		return err
	}
	var errs []error
	if len(doc.GetHttpFilters()) != len(h.GetHttpFilters()) {
		errs = append(errs, fmt.Errorf("%s quotes %d http_filters, %s has %d", rlqsDocFile, len(doc.GetHttpFilters()), envoyRLQSFile, len(h.GetHttpFilters())))
	} else {
		for i, f := range doc.GetHttpFilters() {
			if !proto.Equal(f, h.GetHttpFilters()[i]) {
				errs = append(errs, fmt.Errorf("%s: http_filters[%d] (%s) differs from %s's", rlqsDocFile, i, f.GetName(), envoyRLQSFile))
			}
		}
	}
	if len(docClusters.GetClusters()) == 0 {
		errs = append(errs, fmt.Errorf("%s quotes no cluster", rlqsDocFile))
	}
	for _, c := range docClusters.GetClusters() {
		if fc, err := b.cluster(envoyRLQSFile, c.GetName()); err != nil {
			errs = append(errs, err)
		} else if !proto.Equal(c, fc) {
			errs = append(errs, fmt.Errorf("%s: cluster %s differs from %s's", rlqsDocFile, c.GetName(), envoyRLQSFile))
		}
	}
	return errors.Join(errs...)
}
