package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
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
	// ShouldRateLimit answers POST /json; nil serves no /json.
	ShouldRateLimit func(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// New serves GET /healthz (the process is alive), GET /readyz (200 when
// o.Ready, else 503), GET /rules (the rules being served, as JSON) and
// /metrics when o.Metrics is set; and envoyproxy/ratelimit's endpoints:
// GET /healthcheck, /rlconfig (see RLConfig) and /json when
// o.ShouldRateLimit is set.
func New(o Options) http.Handler {
	mux := http.NewServeMux()
	// As the reference: 200 and "OK" while ready, 500 otherwise.
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if o.Ready != nil && !o.Ready() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte("OK"))
	})
	mux.Handle("GET /rlconfig", RLConfig(o.Rules))
	if o.ShouldRateLimit != nil {
		// Any method, as the reference's router.
		mux.HandleFunc("/json", jsonHandler(o.ShouldRateLimit))
	}
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

// jsonHandler answers envoyproxy/ratelimit's JSON form of ShouldRateLimit:
// a RateLimitRequest in protojson, the RateLimitResponse in protojson with
// status 200, 429 when OVER_LIMIT, and 500 when UNKNOWN; 400 for a body
// that is not a request, or a request the service refuses.
func jsonHandler(should func(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		var req rlsv3.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		resp, err := should(r.Context(), &req)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.OverallCode {
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	}
}
