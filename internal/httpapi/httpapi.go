package httpapi

import (
	"encoding/json"
	"net/http"
)

// Options configure the debugging and health endpoints.
type Options struct {
	// Rules returns the rules being served, rendered as JSON by GET /rules;
	// nil renders null.
	Rules func() any
	// Ready reports whether rules are loaded and the store answers.
	Ready func() bool
	// RulesStatus returns what GET /rules shows beside the rules, such as
	// the last reload error; nil adds nothing.
	RulesStatus func() map[string]any
	// Metrics serves GET /metrics; nil serves none.
	Metrics http.Handler
}

// New serves GET /healthz (the process is alive), GET /readyz (200 when
// o.Ready, else 503) and GET /rules (the rules being served, as JSON), and
// /metrics when o.Metrics is set.
func New(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if o.Ready != nil && !o.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /rules", func(w http.ResponseWriter, r *http.Request) {
		var rules any
		if o.Rules != nil {
			rules = o.Rules()
		}
		out := map[string]any{"rules": rules}
		if o.RulesStatus != nil {
			for k, v := range o.RulesStatus() {
				out[k] = v
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	})
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	return mux
}
