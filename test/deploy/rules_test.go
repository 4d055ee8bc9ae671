package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// Checks of the rules (deploy/rules/edge.yaml) against the descriptors the Envoy route sends.

// parseRules loads rules with the sidecar's own loader, which is strict: a file the sidecar would refuse
// fails here too.
func parseRules(raw []byte) (*rules.Set, error) {
	return rules.Parse([]string{rulesFile}, map[string][]byte{rulesFile: raw})
}

// checkDescriptorShapes: every descriptor the route can send (each skip_if_absent entry present or not)
// is non-empty and gets a limit from the rules, as the sidecar matches them; a shape the rules do not limit
// is a typo on one side.
func checkDescriptorShapes(b *bundle) error {
	_, h, rl, err := b.ingress(envoyFile)
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
			} else if ok, err := limited(b.rules, rl.GetDomain(), keys); err != nil {
				errs = append(errs, fmt.Errorf("%s: rate_limits[%d], keys %v: %w", envoyFile, i, keys, err))
			} else if !ok {
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

// limited reports whether a descriptor of keys, whatever their values, gets a limit from the rules of domain:
// a sidecar server with those rules and an in-memory store answers it.
func limited(r *rules.Set, domain string, keys []string) (bool, error) {
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: r})
	if err != nil {
		return false, err
	}
	d := &rlv3.RateLimitDescriptor{}
	for _, k := range keys {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: "any"})
	}
	resp, err := srv.ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
	if err != nil {
		return false, err
	}
	return resp.GetStatuses()[0].GetCurrentLimit() != nil, nil
}
