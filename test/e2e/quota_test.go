//go:build e2e

package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"text/template"
	"time"
)

var quotaTemplate = template.Must(template.ParseFiles(filepath.Join("testdata", "quota-envoy.yaml.tmpl")))

// TestQuotaPolicyThroughEnvoy: AI Gateway's QuotaPolicy budget through
// Envoy 1.40, with responses of 7 tokens against 10 per hour. The budget
// is in quota_mode, and as envoyproxy/ratelimit decides since its #1059 a
// request whose quota descriptors are all spent is OVER_LIMIT: the third
// call gets 429 and never reaches the upstream, and its check counts
// nothing, while both charges are counted in full.
func TestQuotaPolicyThroughEnvoy(t *testing.T) {
	t.Parallel()
	inOneHour() // the budget is per hour
	app, served := costApp(t, "7")
	b := startBudgetStack(t, "ai-gateway-quota", quotaTemplate, app)
	key := b.key("backend_name", "default/small", "model_name_override", "m")
	b.call(t, "alice", http.StatusOK)
	b.holds(t, key, 8) // the check's hit and the charge
	b.call(t, "alice", http.StatusOK)
	b.holds(t, key, 16) // past the budget: charged all the same
	b.call(t, "alice", http.StatusTooManyRequests)
	b.call(t, "alice", http.StatusTooManyRequests)
	time.Sleep(200 * time.Millisecond)
	b.holds(t, key, 16)
	if n := served.Load(); n != 2 {
		t.Errorf("upstream served %d requests, want 2", n)
	}
}
