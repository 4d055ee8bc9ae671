package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

const edgeRules = `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
`

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	set, err := rules.Parse([]string{"edge.yaml"}, map[string][]byte{"edge.yaml": []byte(edgeRules)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveReload(nil)
	var ready atomic.Bool
	h := New(Options{
		Rules:       func() any { return srv.Rules() },
		Ready:       ready.Load,
		RulesStatus: func() map[string]any { return map[string]any{"last_reload_error": nil} },
		Metrics:     promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	})
	get := func(method, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}

	if code, _ := get("GET", "/healthz"); code != 200 {
		t.Errorf("GET /healthz = %d, want 200", code)
	}
	if code, _ := get("GET", "/readyz"); code != 503 {
		t.Errorf("GET /readyz before ready = %d, want 503", code)
	}
	ready.Store(true)
	if code, _ := get("GET", "/readyz"); code != 200 {
		t.Errorf("GET /readyz when ready = %d, want 200", code)
	}
	code, body := get("GET", "/rules")
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
		t.Fatalf("GET /rules = %d, %v: %s", code, err, body)
	}
	if !strings.Contains(string(v["rules"]), `"edge"`) || string(v["last_reload_error"]) != "null" {
		t.Errorf("GET /rules = %s, want domain edge and last_reload_error null", body)
	}
	code, body = get("GET", "/metrics")
	if code != 200 || !strings.Contains(body, "ratelimit_rules_last_reload_success 1") {
		t.Errorf("GET /metrics = %d:\n%s\nwant ratelimit_rules_last_reload_success 1", code, body)
	}
	if code, _ := get("POST", "/rules"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /rules = %d, want 405", code)
	}

	bare := New(Options{})
	rec := httptest.NewRecorder()
	bare.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics without Options.Metrics = %d, want 404", rec.Code)
	}
	rec = httptest.NewRecorder()
	bare.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 {
		t.Errorf("GET /readyz without Options.Ready = %d, want 200", rec.Code)
	}
	rec = httptest.NewRecorder()
	bare.ServeHTTP(rec, httptest.NewRequest("GET", "/rules", nil))
	if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != "{\n  \"rules\": null\n}" {
		t.Errorf("GET /rules without Options.Rules = %d %q, want 200 and null rules", rec.Code, got)
	}
}

// TestReferenceEndpoints checks envoyproxy/ratelimit's endpoints:
// /healthcheck, /json and /rlconfig.
func TestReferenceEndpoints(t *testing.T) {
	t.Parallel()
	const data = `domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: k2
        shadow_mode: true
        rate_limit: {unit: Second, requests_per_unit: 10}
  - key: open
    rate_limit: {unlimited: true}
`
	set, err := rules.Parse([]string{"d.yaml"}, map[string][]byte{"d.yaml": []byte(data)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory(), Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	h := New(Options{Rules: func() any { return srv.Rules() }, Ready: ready.Load, ShouldRateLimit: srv.ShouldRateLimit})
	kv := `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`
	tests := []struct {
		name, method, path, body string
		ready                    bool
		code                     int
		want                     string // in the body
	}{
		{"healthcheck not ready", "GET", "/healthcheck", "", false, 500, ""},
		{"healthcheck ready", "GET", "/healthcheck", "", true, 200, "OK"},
		{"json ok", "POST", "/json", kv, true, 200, `"overallCode":"OK"`},
		{"json over limit", "POST", "/json", kv, true, 429, `"overallCode":"OVER_LIMIT"`},
		{"json not json", "POST", "/json", "{", true, 400, "Bad Request"},
		{"json invalid request", "POST", "/json", `{"domain": ""}`, true, 400, "Bad Request"},
		{"rlconfig", "GET", "/rlconfig", "", true, 200, "d.k_v: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n" +
			"d.k_v.k2: unit=SECOND requests_per_unit=10, shadow_mode: true, quota_mode: false\n" +
			"d.open: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n"},
	}
	for _, tt := range tests { // in order: /json counts
		ready.Store(tt.ready)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("%s: %s %s = %d %q, want %d and %q", tt.name, tt.method, tt.path, rec.Code, rec.Body, tt.code, tt.want)
		}
	}
	rec := httptest.NewRecorder()
	RLConfig(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/rlconfig", nil))
	if rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("RLConfig(nil) = %d %q, want 200 and nothing", rec.Code, rec.Body)
	}
}
