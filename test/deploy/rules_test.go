package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// Checks of the rules (deploy/rules/edge.yaml) against the descriptors the Envoy route sends.

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
