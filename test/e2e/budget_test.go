//go:build e2e

package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"text/template"
	"time"
)

// budgetTemplate is a route that checks a token budget at request time and
// charges the upstream's reported cost when the stream is done.
var budgetTemplate = template.Must(template.ParseFiles(filepath.Join("testdata", "budget-envoy.yaml.tmpl")))

// TestTokenBudget: with a budget of 1000 tokens and responses that cost 600,
// the second response's charge does not fit and is counted all the same, so
// the third request is refused with 429, and Redis holds the charged 1200.
func TestTokenBudget(t *testing.T) {
	t.Parallel()
	inOneHour() // the budget is per hour
	app, served := costApp(t, "600")
	b := startBudgetStack(t, "budget", budgetTemplate, app)
	b.call(t, "alice", http.StatusOK)
	b.counted(t, "alice", 600)
	b.call(t, "alice", http.StatusOK)
	b.counted(t, "alice", 1200) // past the budget: counted all the same
	b.call(t, "alice", http.StatusTooManyRequests)
	b.call(t, "alice", http.StatusTooManyRequests)
	// The refused requests neither reached the upstream nor counted.
	time.Sleep(200 * time.Millisecond)
	b.counted(t, "alice", 1200)
	if n := served.Load(); n != 2 {
		t.Errorf("upstream served %d requests, want 2", n)
	}
}
