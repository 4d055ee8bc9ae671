package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// RLConfig serves envoyproxy/ratelimit's /rlconfig: the loaded rules as
// text, one line per limit, in the reference's format:
//
//	domain.key_value.key2: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false
//
// rules returns the rules being served; their JSON (GET /rules's) is read
// back, so the dump follows the rules as decoded. Domains are in the order of
// that JSON (sorted), descriptors in file order. nil rules, or none, serve
// an empty body.
func RLConfig(rules func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if rules == nil {
			return
		}
		text, err := dumpRules(rules())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte(text))
	})
}

// dumpFile and dumpNode are the parts of the rules' JSON the dump reads.
type dumpFile struct {
	Domain      string     `json:"domain"`
	Descriptors []dumpNode `json:"descriptors"`
}

type dumpNode struct {
	Key         string      `json:"key"`
	Value       string      `json:"value"`
	RateLimit   *dumpLimit  `json:"rate_limit"`
	RateLimits  []dumpLimit `json:"rate_limits"`
	ShadowMode  bool        `json:"shadow_mode"`
	QuotaMode   bool        `json:"quota_mode"`
	Descriptors []dumpNode  `json:"descriptors"`
}

type dumpLimit struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

func dumpRules(rules any) (string, error) {
	data, err := json.Marshal(rules)
	if err != nil {
		return "", fmt.Errorf("httpapi: rules: %w", err)
	}
	var set struct {
		Domains []dumpFile `json:"domains"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return "", fmt.Errorf("httpapi: rules: %w", err)
	}
	var b strings.Builder
	for _, f := range set.Domains {
		dumpNodes(&b, f.Domain, f.Descriptors)
	}
	return b.String(), nil
}

// dumpNodes writes a line per limit of nodes and their children; parent is
// the full key so far, as the reference builds it: domain, then key or
// key_value per level, joined by dots.
func dumpNodes(b *strings.Builder, parent string, nodes []dumpNode) {
	for _, n := range nodes {
		key := parent + "." + n.Key
		if n.Value != "" {
			key += "_" + n.Value
		}
		limits := n.RateLimits
		if n.RateLimit != nil {
			limits = append([]dumpLimit{*n.RateLimit}, limits...)
		}
		for _, l := range limits {
			unit := strings.ToUpper(l.Unit)
			if unit == "" {
				unit = "UNKNOWN" // unlimited: the reference prints the unset unit so
			}
			fmt.Fprintf(b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
				key, unit, l.RequestsPerUnit, n.ShadowMode, n.QuotaMode)
		}
		dumpNodes(b, key, n.Descriptors)
	}
}
