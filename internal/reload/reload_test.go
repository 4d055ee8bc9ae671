package reload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/httpapi"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// reloadDeadline is the promise: a change on disk serves within 2 s.
const reloadDeadline = 2 * time.Second

// edgeRules is a rules file of domain "edge" whose descriptor k has limit
// n and descriptor j limit 10n, so a response shows which set answered.
func edgeRules(n int) string {
	return fmt.Sprintf(`domain: edge
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: j
    rate_limit: {unit: hour, requests_per_unit: %d}
`, n, 10*n)
}

// badRules has problems on lines 4 (unit) and 6 (field).
const badRules = `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: j
    rate_limt: {unit: hour, requests_per_unit: 1}
`

func desc(key, value string) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
}

// checkLimits asks, without counting, for descriptors k and j of domain
// and returns their current limits (0 when none).
func checkLimits(ctx context.Context, srv *envoyrls.Server, domain string) (k, j uint32, err error) {
	dk, dj := desc("k", "v"), desc("j", "v")
	dk.HitsAddend, dj.HitsAddend = wrapperspb.UInt64(0), wrapperspb.UInt64(0)
	resp, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{dk, dj}})
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Statuses) != 2 {
		return 0, 0, fmt.Errorf("%d statuses, want 2", len(resp.Statuses))
	}
	return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(), resp.Statuses[1].GetCurrentLimit().GetRequestsPerUnit(), nil
}

func limitOf(t *testing.T, srv *envoyrls.Server, domain string) uint32 {
	t.Helper()
	k, _, err := checkLimits(context.Background(), srv, domain)
	if err != nil {
		t.Fatalf("ShouldRateLimit = %v", err)
	}
	return k
}

// waitLimit polls until domain's limit for k is want, failing after
// reloadDeadline.
func waitLimit(t *testing.T, srv *envoyrls.Server, domain string, want uint32) {
	t.Helper()
	deadline := time.Now().Add(reloadDeadline)
	for {
		got := limitOf(t, srv, domain)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit of %s/k = %d after %v, want %d", domain, got, reloadDeadline, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeAtomic replaces path by a rename, as editors and config tools do.
func writeAtomic(t testing.TB, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type reloadFixture struct {
	srv *envoyrls.Server
	r   *Watcher
	reg *prometheus.Registry // the metrics that r reports to
}

// metricValue returns the value of the counter or gauge name whose labels
// include labels (name, value pairs), or -1 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if !hasLabels(m.Label, labels) {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return -1
}

// hasLabels reports whether have includes every name, value pair of want.
func hasLabels(have []*dto.LabelPair, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if !slices.ContainsFunc(have, func(lp *dto.LabelPair) bool {
			return lp.GetName() == want[i] && lp.GetValue() == want[i+1]
		}) {
			return false
		}
	}
	return true
}

// startReloader serves path through a Server, loads it, and runs the
// Watcher until the test ends; it returns once the watches are in place.
func startReloader(t *testing.T, path string) *reloadFixture {
	t.Helper()
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Path: path, Apply: srv.SetRules, Logger: zaptest.NewLogger(t), OnReload: m.ObserveReload})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err != nil {
		t.Fatalf("first Reload = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	select {
	case <-r.watching:
	case err := <-done:
		t.Fatalf("Run = %v before watching", err)
	}
	return &reloadFixture{srv: srv, r: r, reg: reg}
}

func TestReloadFileEdit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, edgeRules(5))
	f := startReloader(t, path)
	if got := limitOf(t, f.srv, "edge"); got != 5 {
		t.Fatalf("limit = %d at start, want 5", got)
	}
	writeFile(t, path, edgeRules(7)) // in place: a Write event
	waitLimit(t, f.srv, "edge", 7)
	writeAtomic(t, path, edgeRules(9)) // by rename, like an editor
	waitLimit(t, f.srv, "edge", 9)
}

func TestReloadDirectoryNewFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), edgeRules(5))
	f := startReloader(t, dir)
	if got := limitOf(t, f.srv, "other"); got != 0 {
		t.Fatalf("limit of other = %d before its file exists, want 0", got)
	}
	writeFile(t, filepath.Join(dir, "other.yaml"), strings.Replace(edgeRules(3), "domain: edge", "domain: other", 1))
	waitLimit(t, f.srv, "other", 3)
	if got := limitOf(t, f.srv, "edge"); got != 5 {
		t.Errorf("limit of edge = %d after adding other.yaml, want 5", got)
	}
	if err := os.Remove(filepath.Join(dir, "other.yaml")); err != nil {
		t.Fatal(err)
	}
	waitLimit(t, f.srv, "other", 0)
}

// configMap writes files the way kubelet's AtomicWriter updates a ConfigMap
// volume: a new timestamped directory, a ..data_tmp symlink to it renamed
// over ..data, user-visible symlinks through ..data, then the old
// directory removed.
type configMap struct {
	dir string
	n   int
	cur string // the timestamped directory ..data points to
}

func (c *configMap) write(t *testing.T, files map[string]string) {
	t.Helper()
	c.n++
	ts := fmt.Sprintf("..2026_11_22_10_00_%02d.%09d", c.n, 100000000+c.n)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(c.dir, ts), 0o755))
	for name, data := range files {
		must(os.WriteFile(filepath.Join(c.dir, ts, name), []byte(data), 0o644))
	}
	data := filepath.Join(c.dir, "..data")
	if c.cur == "" {
		must(os.Symlink(ts, data))
	} else {
		tmp := filepath.Join(c.dir, "..data_tmp")
		must(os.Symlink(ts, tmp))
		must(os.Rename(tmp, data)) // the atomic swap
	}
	for name := range files {
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			must(os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if c.cur != "" {
		old, _ := os.ReadDir(filepath.Join(c.dir, c.cur))
		for _, e := range old {
			if _, ok := files[e.Name()]; !ok {
				must(os.Remove(filepath.Join(c.dir, e.Name())))
			}
		}
		must(os.RemoveAll(filepath.Join(c.dir, c.cur)))
	}
	c.cur = ts
}

func TestReloadConfigMapSwap(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"directory", "file"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			cm := &configMap{dir: t.TempDir()}
			cm.write(t, map[string]string{"edge.yaml": edgeRules(5)})
			path := cm.dir
			if target == "file" {
				path = filepath.Join(cm.dir, "edge.yaml")
			}
			f := startReloader(t, path)
			if got := limitOf(t, f.srv, "edge"); got != 5 {
				t.Fatalf("limit = %d at start, want 5", got)
			}
			// Several swaps: a watch on the first target would die after one.
			for _, n := range []int{7, 9, 11} {
				cm.write(t, map[string]string{"edge.yaml": edgeRules(n)})
				waitLimit(t, f.srv, "edge", uint32(n))
			}
			if st := f.r.Status(); st.LastError != nil {
				t.Errorf("Status().LastError = %+v after clean swaps, want nil", st.LastError)
			}
		})
	}
}

// TestReloadDirectoryReplaced replaces the rules directory itself; the
// Watcher must notice and watch the new one.
func TestReloadDirectoryReplaced(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "rules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "edge.yaml"), edgeRules(5))
	f := startReloader(t, dir)

	next := filepath.Join(base, "rules.next")
	if err := os.Mkdir(next, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(next, "edge.yaml"), edgeRules(7))
	if err := os.Rename(dir, filepath.Join(base, "rules.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
	waitLimit(t, f.srv, "edge", 7)
	writeFile(t, filepath.Join(dir, "edge.yaml"), edgeRules(9)) // seen only through a new watch
	waitLimit(t, f.srv, "edge", 9)
}

// rulesView is GET /rules as JSON.
type rulesView struct {
	Rules struct {
		Files []string `json:"files"`
	} `json:"rules"`
	LastReload      *time.Time `json:"last_reload"`
	LastReloadError *Failure   `json:"last_reload_error"`
}

func getRules(t *testing.T, h http.Handler) rulesView {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/rules", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /rules = %d, want 200", rec.Code)
	}
	var v rulesView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("GET /rules: %v in %s", err, rec.Body)
	}
	return v
}

func TestReloadBadEditKeepsRulesThenRecovers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, edgeRules(5))
	f := startReloader(t, path)
	h := httpapi.New(httpapi.Options{Rules: func() any { return f.srv.Rules() }, RulesStatus: f.r.RulesStatus})
	v := getRules(t, h)
	if v.LastReload == nil || v.LastReloadError != nil {
		t.Fatalf("GET /rules at start: last_reload %v, last_reload_error %+v; want a time and null", v.LastReload, v.LastReloadError)
	}
	good := *v.LastReload

	writeFile(t, path, badRules)
	deadline := time.Now().Add(reloadDeadline)
	for v = getRules(t, h); v.LastReloadError == nil; v = getRules(t, h) {
		if time.Now().After(deadline) {
			t.Fatalf("no last_reload_error %v after a bad edit", reloadDeadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e := v.LastReloadError
	for _, want := range []string{path + ":4: descriptors[0].rate_limit.unit", path + ":6: descriptors[1].rate_limt"} {
		if !strings.Contains(e.Err, want) {
			t.Errorf("last_reload_error.error = %q, want it to contain %q", e.Err, want)
		}
	}
	if len(e.Files) != 1 || e.Files[0] != path {
		t.Errorf("last_reload_error.files = %q, want [%q]", e.Files, path)
	}
	if e.Time.IsZero() || v.LastReload == nil || !v.LastReload.Equal(good) {
		t.Errorf("after a bad edit: error time %v, last_reload %v; want a time and still %v", e.Time, v.LastReload, good)
	}
	if got := limitOf(t, f.srv, "edge"); got != 5 {
		t.Errorf("limit = %d after a bad edit, want the last good 5", got)
	}
	if got := metricValue(t, f.reg, "ratelimit_rules_last_reload_success"); got != 0 {
		t.Errorf("ratelimit_rules_last_reload_success = %v after a bad edit, want 0", got)
	}
	if got := metricValue(t, f.reg, "ratelimit_reloads_total", "result", "error"); got < 1 {
		t.Errorf(`ratelimit_reloads_total{result="error"} = %v, want >= 1`, got)
	}

	writeFile(t, path, edgeRules(7))
	waitLimit(t, f.srv, "edge", 7)
	v = getRules(t, h)
	if v.LastReloadError != nil || v.LastReload == nil || v.LastReload.Before(e.Time) {
		t.Errorf("after recovery: last_reload_error %+v, last_reload %v; want null and a time after %v", v.LastReloadError, v.LastReload, e.Time)
	}
	if got := metricValue(t, f.reg, "ratelimit_rules_last_reload_success"); got != 1 {
		t.Errorf("ratelimit_rules_last_reload_success = %v after recovery, want 1", got)
	}
}

// TestReloadMethod is the SIGHUP path: Reload without Run.
func TestReloadMethod(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, edgeRules(5))
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Path: path, Apply: srv.SetRules})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, badRules)
	err = r.Reload(ctx)
	var re *rules.Error
	if !errors.As(err, &re) || len(re.Problems) != 2 {
		t.Fatalf("Reload of bad rules = %v, want a *RulesError with 2 problems", err)
	}
	if got := limitOf(t, srv, "edge"); got != 5 {
		t.Errorf("limit = %d after a failed Reload, want 5", got)
	}
	writeFile(t, path, edgeRules(7))
	if err := r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, srv, "edge"); got != 7 {
		t.Errorf("limit = %d after Reload, want 7", got)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Reload(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Reload(cancelled ctx) = %v, want context.Canceled", err)
	}
}

// TestReloadMergeDomains: two files of one domain load only when merging
// is asked for (MERGE_DOMAIN_CONFIG), and then serve both files' limits.
func TestReloadMergeDomains(t *testing.T) {
	t.Parallel()
	for _, merge := range []bool{false, true} {
		t.Run(fmt.Sprint("merge=", merge), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "a.yaml"), "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
			writeFile(t, filepath.Join(dir, "b.yaml"), "domain: edge\ndescriptors:\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 50}\n")
			srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory()})
			if err != nil {
				t.Fatal(err)
			}
			r, err := New(Options{Path: dir, Apply: srv.SetRules, MergeDomains: merge})
			if err != nil {
				t.Fatal(err)
			}
			err = r.Reload(context.Background())
			if !merge {
				if err == nil || !strings.Contains(err.Error(), "edge") {
					t.Fatalf("Reload of two files of domain edge without merging = %v, want an error naming the domain", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Reload with MergeDomains = %v", err)
			}
			if got := limitOf(t, srv, "edge"); got != 5 {
				t.Errorf("limit of k = %d, want 5 from a.yaml", got)
			}
			resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("j", "x")}})
			if err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 50 {
				t.Errorf("limit of j = %v (%v), want 50 from b.yaml", resp.GetStatuses(), err)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Apply: func(*rules.Set) {}}); err == nil {
		t.Error("New without Path = nil error")
	}
	if _, err := New(Options{Path: "x"}); err == nil {
		t.Error("New without Apply = nil error")
	}
}

// TestReloadUnderLoad swaps rules back and forth while many goroutines ask:
// every answer comes from one whole rule set (k=5, j=50 or k=7, j=70) and
// none fails.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, edgeRules(5))
	f := startReloader(t, path)
	ctx := context.Background()

	var stop atomic.Bool
	var calls, sevens atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				k, j, err := checkLimits(ctx, f.srv, "edge")
				calls.Add(1)
				switch {
				case err != nil:
					errs <- err
					return
				case k == 5 && j == 50:
				case k == 7 && j == 70:
					sevens.Add(1)
				default:
					errs <- fmt.Errorf("limits k=%d j=%d, want 5/50 or 7/70", k, j)
					return
				}
			}
		})
	}
	for i := range 40 {
		n := 7 // 7, 5, 7, 5, ...
		if i%2 == 1 {
			n = 5
		}
		writeAtomic(t, path, edgeRules(n))
		if err := f.r.Reload(ctx); err != nil {
			t.Errorf("Reload %d = %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls.Load() == 0 || sevens.Load() == 0 {
		t.Errorf("%d calls, %d answered by the second rule set; want both > 0", calls.Load(), sevens.Load())
	}
}

// TestReloadIgnoresOtherFiles writes a file beside the rules on every
// reload, as a log would: that must not reload again, in a loop.
func TestReloadIgnoresOtherFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, edgeRules(5))
	srv, err := envoyrls.NewServer(envoyrls.Options{Store: window.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int64
	r, err := New(Options{Path: path, Apply: srv.SetRules, Debounce: 10 * time.Millisecond, OnReload: func(error) {
		loads.Add(1)
		f, err := os.OpenFile(filepath.Join(dir, "sidecar.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			f.WriteString("reloaded\n")
			f.Close()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-r.watching
	writeFile(t, path, edgeRules(7))
	waitLimit(t, srv, "edge", 7)
	time.Sleep(200 * time.Millisecond) // 20 debounce periods
	if got := loads.Load(); got > 2 {
		t.Errorf("%d loads after one edit, want 1 (2 at most if the edit's events split)", got)
	}
}
