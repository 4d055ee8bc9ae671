package rules

import "encoding/json"

// The *Config types mirror a rules file as loaded, for GET /rules. They are
// a view for people; matching uses the compiled tree.

type domainConfig struct {
	Domain      string             `json:"domain"`
	File        string             `json:"file"`
	FailureMode string             `json:"failure_mode"`
	Algorithm   string             `json:"algorithm"`
	Descriptors []descriptorConfig `json:"descriptors,omitempty"`
}

type descriptorConfig struct {
	Key            string             `json:"key"`
	Value          string             `json:"value,omitempty"`
	RateLimit      *limitConfig       `json:"rate_limit,omitempty"`
	RateLimits     []limitConfig      `json:"rate_limits,omitempty"`
	ShadowMode     bool               `json:"shadow_mode,omitempty"`
	DetailedMetric bool               `json:"detailed_metric,omitempty"`
	ValueToMetric  bool               `json:"value_to_metric,omitempty"`
	FailureMode    string             `json:"failure_mode,omitempty"`
	Descriptors    []descriptorConfig `json:"descriptors,omitempty"`
}

type limitConfig struct {
	RequestsPerUnit *uint32         `json:"requests_per_unit,omitempty"`
	Unit            string          `json:"unit,omitempty"`
	UnitMultiplier  uint32          `json:"unit_multiplier,omitempty"`
	Unlimited       bool            `json:"unlimited,omitempty"`
	Name            string          `json:"name,omitempty"`
	Replaces        []replaceConfig `json:"replaces,omitempty"`
	Algorithm       string          `json:"algorithm,omitempty"`
}

type replaceConfig struct {
	Name string `json:"name"`
}

// MarshalJSON renders the rules as loaded: one object per domain.
func (r *Set) MarshalJSON() ([]byte, error) {
	out := struct {
		Files   []string       `json:"files"`
		Domains []domainConfig `json:"domains"`
	}{Files: r.files, Domains: []domainConfig{}}
	for _, name := range r.Domains() {
		out.Domains = append(out.Domains, r.domains[name].config)
	}
	return json.Marshal(out)
}
