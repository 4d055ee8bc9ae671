//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestRLQS drives the shipped deploy/envoy-rlqs.yaml: two Envoy 1.40 processes with the rate_limit_quota
// filter, two sidecar replicas on one redis-server, and HTTP load of three times the api_key rule's limit
// split 2:1 between the Envoys. The rules (testdata/rlqs.yaml) are deploy/rules/edge.yaml's api_key rule
// with 20 s windows; bucket {api_key: hot} gets the load and {api_key: cold} stays under its limit.
//
// Timeline, on the Redis clock (the sidecars count windows on it; the test converts its own clock with an
// offset measured against Redis TIME, see redisOffset): the load starts at least rlqsPreroll before the
// first whole window W1, so every Envoy has reported and holds an assignment by then.
//   - W1, steady: hot's admitted requests across both Envoys ≤ the bound, and ≥ 90% of the limit.
//   - W2: sidecar A, Envoy A's (the busier one's) replica, is killed with SIGKILL 2 s in. Envoy A keeps its
//     assignment until the TTL and reopens its stream at the next report to sidecar B, the other endpoint of
//     its cluster. The same two assertions hold for W2.
//   - W3: 8 s in, the rules file lowers the limit from 100 to 30, below what hot has already been admitted
//     in W3. Once sidecar B has loaded it, every hot request decided later than one report interval (5 s in
//     Envoy 1.40) plus rlqsSlack is denied until W3 ends.
//   - Throughout: cold, at half its limit, is never denied.
//
// A request is counted from its HTTP response (200 admitted, 429 denied). Envoy decides it at some instant
// between the request's send and its response; for the upper bound a request counts in every window its
// [send, response] interval touches, for the lower bound only in the window that holds all of it, so
// neither assertion is helped by the few requests in flight across a boundary.
func TestRLQS(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t)
	rulesDir := t.TempDir()
	rulesFile := filepath.Join(rulesDir, "rules.yaml")
	baseRules, err := os.ReadFile(filepath.Join("testdata", "rlqs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, rulesFile, baseRules)

	scA := startSidecar(t, "sidecar-a", sidecarOptions{Bin: sidecarBin, Rules: rulesDir, RedisURL: rdb.URL(), RedisTimeout: rlqsRedisTimeout})
	scB := startSidecar(t, "sidecar-b", sidecarOptions{Bin: sidecarBin, Rules: rulesDir, RedisURL: rdb.URL(), RedisTimeout: rlqsRedisTimeout})
	servesRLQS(t, scA)
	servesRLQS(t, scB)
	app := startUpstream(t)
	// Each Envoy's cluster lists both replicas: its own first, the other as failover.
	// The filter's debug log shows every report and assignment, in the output a failed test prints.
	debug := []string{"--component-log-level", "rate_limit_quota:debug"}
	envoyA := startEnvoy(t, envoyBin, "envoy-a", writeRLQSEnvoyConfig(t, t.TempDir(), port(t, app.Listener.Addr().String()), scA, scB), debug...)
	envoyB := startEnvoy(t, envoyBin, "envoy-b", writeRLQSEnvoyConfig(t, t.TempDir(), port(t, app.Listener.Addr().String()), scB, scA), debug...)

	off := redisOffset(t, rdb)
	redisNow := func() time.Time { return time.Now().Add(off) }
	w1 := window.At(redisNow().Add(rlqsPreroll+rlqsWindow), rlqsWindow)
	w2 := window.Window{Start: w1.End(), Size: w1.Size}
	w3 := window.Window{Start: w2.End(), Size: w2.Size}

	ctx, cancel := context.WithCancel(context.Background())
	load := &rlqsLoad{off: off}
	t.Cleanup(load.wait) // after cancel below, or on a Fatal
	t.Cleanup(cancel)
	// 3 × the limit per window, 2:1: Envoy A 2L/W, Envoy B L/W. cold: 20 per window in all, half its limit.
	hotA := rlqsWindow / (2 * rlqsLimit)
	hotB := rlqsWindow / rlqsLimit
	load.start(ctx, t, envoyA, "hot", hotA)
	load.start(ctx, t, envoyB, "hot", hotB)
	load.start(ctx, t, envoyA, "cold", rlqsColdEvery)
	load.start(ctx, t, envoyB, "cold", rlqsColdEvery)
	t.Logf("load from %v; W1 starts %v", redisNow().Format(time.TimeOnly), msTime(w1.Start).Format(time.TimeOnly))

	sleepUntil(msTime(w2.Start).Add(2 * time.Second).Add(-off))
	scA.kill()
	t.Logf("killed sidecar-a at %v", redisNow().Format(time.StampMilli))

	sleepUntil(msTime(w3.Start).Add(8 * time.Second).Add(-off))
	loaded := reloadRules(t, scB, rulesFile, strings.Replace(string(baseRules), "requests_per_unit: 100", "requests_per_unit: 30", 1))
	effective := loaded.Add(off).Add(rlqsReport + rlqsSlack)
	t.Logf("sidecar-b loaded the lower limit at %v; denials expected from %v", loaded.Add(off).Format(time.StampMilli), effective.Format(time.StampMilli))
	sleepUntil(msTime(w3.End()).Add(-off))
	cancel()
	load.wait()
	if err := load.failure(); err != nil {
		t.Fatal(err)
	}

	bound := rlqsBound()
	for i, w := range []window.Window{w1, w2} {
		touching, inside, perEnvoy := load.admitted("hot", w)
		t.Logf("W%d %v: hot admitted %d (%d wholly inside; by Envoy %v), bound %d, floor %d",
			i+1, msTime(w.Start).Format(time.TimeOnly), touching, inside, perEnvoy, bound, rlqsFloor())
		if touching > bound {
			t.Errorf("W%d: hot admitted %d across both Envoys, want ≤ %d (L=%d, ε=%.3f)", i+1, touching, bound, rlqsLimit, rlqsEpsilon())
		}
		if inside < rlqsFloor() {
			t.Errorf("W%d: hot admitted %d across both Envoys, want ≥ %d (90%% of L=%d)", i+1, inside, rlqsFloor(), rlqsLimit)
		}
	}

	late, lateAdmitted := load.after("hot", effective, w3)
	t.Logf("W3 after the reload took effect: %d hot requests, %d admitted", late, lateAdmitted)
	if late < 20 {
		t.Errorf("only %d hot requests between %v and the end of W3: too few to check the reload", late, effective.Format(time.StampMilli))
	}
	if lateAdmitted > 0 {
		t.Errorf("%d hot requests admitted later than one report interval (+%v) after the limit fell below what W3 had admitted, want 0", lateAdmitted, rlqsSlack)
	}

	if sent, denied := load.denied("cold"); denied > 0 || sent == 0 {
		t.Errorf("cold, under its limit: %d of %d requests denied, want 0 of > 0", denied, sent)
	}
	if t.Failed() {
		t.Logf("per second on the Redis clock, admitted/denied:\n%s", load.timeline())
	}
}

// Settings of TestRLQS. The rules are testdata/rlqs.yaml.
const (
	rlqsWindow    = 20 * time.Second // the api_key rule's window (unit_multiplier: 20)
	rlqsLimit     = 100              // its requests_per_unit
	rlqsReport    = 5 * time.Second  // Envoy 1.40 reports every 5 s, whatever reporting_interval says
	rlqsColdEvery = 2 * time.Second  // cold's pace per Envoy: 20 a window in all
	// rlqsPreroll: the load runs this long before W1 starts: the first report of each bucket goes out on
	// its first request, and the next at the following report tick carries the demand.
	rlqsPreroll = rlqsReport + 2*time.Second
	// rlqsSlack covers what follows the report that carries a change: one Redis round trip, the answer on
	// the stream, and Envoy's main thread handing the assignment to its worker. It is not the reload's
	// latency, which the test waits out by polling /rules before it starts the clock.
	rlqsSlack = time.Second
	// rlqsRedisTimeout bounds each Redis call of a sidecar. RLQS reports carry no deadline, and nothing waits
	// on them per request, so a busy machine should not turn one into a failure.
	rlqsRedisTimeout = time.Second
	// rlqsEnvoys is the number of Envoys (RLQS clients) holding shares of hot.
	rlqsEnvoys = 2
)

// rlqsBurst is the fleet burst B of a window rule: one second's worth of the limit, at least 1, at most L
// (pkg/rlqs: ceil(L·1s/W)).
func rlqsBurst() int {
	b := int((int64(rlqsLimit)*int64(time.Second) + int64(rlqsWindow) - 1) / int64(rlqsWindow))
	return min(max(b, 1), rlqsLimit)
}

// rlqsBound is the most a window may admit across the fleet: L × (1 + ε), as docs/rlqs.md "The guarantee"
// states it for a window rule, L + B + E with E = E_floor ≤ 2f in a steady state: the ledger keeps the rates
// of the unexpired shares at ≤ L/W, so a window admits at most L from refills; on top come what the Envoys'
// token buckets hold when it starts, at most the fleet burst B, and the two-token floor of max_tokens that
// each of the f ≤ n clients may add beyond it. So ε = (B + 2n)/L for n Envoys: 9% here. The window in which
// a replica is killed is held to the same bound: the issue asks that the kill change neither outcome.
func rlqsBound() int { return rlqsLimit + rlqsBurst() + 2*rlqsEnvoys }

// rlqsEpsilon is the ε of rlqsBound.
func rlqsEpsilon() float64 { return float64(rlqsBound()-rlqsLimit) / rlqsLimit }

// rlqsFloor is 90% of the limit: what a whole window under load must admit once every Envoy holds an
// assignment.
func rlqsFloor() int { return rlqsLimit * 9 / 10 }

// writeRLQSEnvoyConfig writes deploy/envoy-rlqs.yaml, as shipped, with only what a test on one machine must
// change: loopback addresses on ports the kernel picks, the upstream's port, and the ratelimit cluster's
// endpoints, the two sidecars, with an active gRPC health check so that a new stream avoids a dead one
// (primary first, failover at priority 1). It validates the result with `envoy --mode validate`.
func writeRLQSEnvoyConfig(t *testing.T, dir string, appPort int, primary, failover *sidecar) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "envoy-rlqs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		t.Fatal(err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(j, bs); err != nil {
		t.Fatalf("deploy/envoy-rlqs.yaml: %v", err)
	}
	bs.GetAdmin().Address = loopback(0)
	for _, l := range bs.GetStaticResources().GetListeners() {
		l.Address = loopback(0)
	}
	clusters := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
		switch c.GetName() {
		case "app":
			c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().Address = loopback(appPort)
		case "ratelimit":
			c.LoadAssignment.Endpoints = nil
			for prio, s := range []*sidecar{primary, failover} {
				c.LoadAssignment.Endpoints = append(c.LoadAssignment.Endpoints, &endpointv3.LocalityLbEndpoints{
					Priority: uint32(prio),
					LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{
						Endpoint: &endpointv3.Endpoint{Address: loopback(port(t, s.GRPCAddr))},
					}}},
				})
			}
			half := durationpb.New(500 * time.Millisecond)
			c.HealthChecks = []*corev3.HealthCheck{{
				Timeout: durationpb.New(250 * time.Millisecond), Interval: half,
				// Without it a cluster that has not carried traffic yet is checked once a minute.
				NoTrafficInterval:  half,
				UnhealthyThreshold: wrapperspb.UInt32(1), HealthyThreshold: wrapperspb.UInt32(1),
				HealthChecker: &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}},
			}}
		}
	}
	if !clusters["app"] || !clusters["ratelimit"] {
		t.Fatalf("deploy/envoy-rlqs.yaml: clusters %v, want app and ratelimit", clusters)
	}
	out, err := protojson.Marshal(bs)
	if err != nil {
		t.Fatal(err)
	}
	return writeEnvoyFile(t, envoyBin, dir, out)
}

func loopback(port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

// servesRLQS fails the test unless s answers an RLQS report on its gRPC port with no extra flag. It
// reports a bucket of its own ({api_key: probe}), which the load never uses.
func servesRLQS(t *testing.T, s *sidecar) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatalf("%s: StreamRateLimitQuotas: %v", s.Name(), err)
	}
	err = stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"api_key": "probe"}},
		TimeElapsed:        durationpb.New(time.Second),
		NumRequestsAllowed: 1,
	}}})
	if err != nil {
		t.Fatalf("%s: send a report: %v", s.Name(), err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("%s does not answer an RLQS report: %v", s.Name(), err)
	}
	if len(resp.GetBucketAction()) != 1 || resp.GetBucketAction()[0].GetBucketId().GetBucket()["api_key"] != "probe" {
		t.Fatalf("%s answered %v, want one action for bucket {api_key: probe}", s.Name(), resp)
	}
	_ = stream.CloseSend()
}

// redisOffset is the Redis server's clock minus this process's, from TIME halfway through one round trip.
func redisOffset(t *testing.T, s *redistest.Server) time.Duration {
	t.Helper()
	c := s.Client(t)
	before := time.Now()
	rt, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	return rt.Sub(before.Add(after.Sub(before) / 2))
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// writeAtomic replaces path with data by a rename, as a ConfigMap update does, so the sidecar never reads a
// half-written file.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reloadRules writes rules to path and waits until s reports a reload after the write; it returns when s
// had loaded them, on this process's clock (the time of the poll that saw it).
func reloadRules(t *testing.T, s *sidecar, path, rules string) time.Time {
	t.Helper()
	wrote := time.Now()
	writeAtomic(t, path, []byte(rules))
	c := &http.Client{Timeout: time.Second}
	deadline := wrote.Add(5 * time.Second)
	for {
		var st struct {
			LastReload      time.Time `json:"last_reload"`
			LastReloadError string    `json:"last_reload_error"`
		}
		resp, err := c.Get("http://" + s.HTTPAddr + "/rules")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		now := time.Now()
		if err == nil && st.LastReloadError != "" {
			t.Fatalf("%s refused the new rules: %s", s.Name(), st.LastReloadError)
		}
		if err == nil && !st.LastReload.Before(wrote) {
			return now
		}
		if now.After(deadline) {
			t.Fatalf("%s: no reload within 5 s of writing %s (last: %v, %v)", s.Name(), path, st.LastReload, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rlqsLoad sends paced requests through Envoys and keeps every outcome. Its goroutines end when the context
// passed to start is done; wait waits for them.
type rlqsLoad struct {
	off time.Duration // Redis clock minus ours

	wg      sync.WaitGroup
	mu      sync.Mutex
	results []rlqsResult
	errs    []error
}

// rlqsResult is one request: its bucket, the Envoy, when it was sent and answered (on the Redis clock, Unix
// ms) and the status.
type rlqsResult struct {
	key, envoy string
	sent, done int64
	status     int
}

// start sends GET / with x-api-key: key through e every interval until ctx is done, each request on its own
// goroutine so a slow answer does not slow the pace.
func (l *rlqsLoad) start(ctx context.Context, t *testing.T, e *envoy, key string, every time.Duration) {
	c := newClient(t)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				l.wg.Add(1)
				go func() {
					defer l.wg.Done()
					l.send(ctx, c, e, key)
				}()
			}
		}
	}()
}

func (l *rlqsLoad) send(ctx context.Context, c *client, e *envoy, key string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Listener+"/", nil)
	if err != nil {
		l.fail(err)
		return
	}
	req.Header.Set("x-api-key", key)
	sent := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			l.fail(fmt.Errorf("GET via %s as %s: %w", e.Name, key, err))
		}
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	done := time.Now()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		l.fail(fmt.Errorf("GET via %s as %s: %s, want 200 or 429", e.Name, key, resp.Status))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.results = append(l.results, rlqsResult{key: key, envoy: e.Name, sent: sent.Add(l.off).UnixMilli(), done: done.Add(l.off).UnixMilli(), status: resp.StatusCode})
}

func (l *rlqsLoad) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *rlqsLoad) wait() { l.wg.Wait() }

func (l *rlqsLoad) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 5 {
		return fmt.Errorf("%d requests failed, the first 5: %w", len(l.errs), errors.Join(l.errs[:5]...))
	}
	return errors.Join(l.errs...)
}

// admitted counts key's 200s in w: touching, those whose [sent, done] meets w; inside, those wholly in it;
// and the touching ones by Envoy.
func (l *rlqsLoad) admitted(key string, w window.Window) (touching, inside int, byEnvoy map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byEnvoy = map[string]int{}
	for _, r := range l.results {
		if r.key != key || r.status != http.StatusOK || r.done < w.Start || r.sent >= w.End() {
			continue
		}
		touching++
		byEnvoy[r.envoy]++
		if r.sent >= w.Start && r.done < w.End() {
			inside++
		}
	}
	return touching, inside, byEnvoy
}

// after counts key's requests sent at or after from and answered within w, and the 200s among them.
func (l *rlqsLoad) after(key string, from time.Time, w window.Window) (n, ok int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.results {
		if r.key == key && r.sent >= from.UnixMilli() && r.done < w.End() {
			n++
			if r.status == http.StatusOK {
				ok++
			}
		}
	}
	return n, ok
}

// denied counts key's requests and the 429s among them.
func (l *rlqsLoad) denied(key string) (n, denied int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.results {
		if r.key == key {
			n++
			if r.status == http.StatusTooManyRequests {
				denied++
			}
		}
	}
	return n, denied
}

// timeline renders the outcomes per second (by the time of the answer) and per Envoy and key, one line a
// second: "hh:mm:ss envoy-a hot 10/0 cold 1/0 | envoy-b ...".
func (l *rlqsLoad) timeline() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type cell struct{ ok, denied int }
	counts := map[int64]map[string]*cell{}
	var first, last int64
	for i, r := range l.results {
		sec := r.done / 1000
		if i == 0 || sec < first {
			first = sec
		}
		last = max(last, sec)
		if counts[sec] == nil {
			counts[sec] = map[string]*cell{}
		}
		k := r.envoy + " " + r.key
		if counts[sec][k] == nil {
			counts[sec][k] = &cell{}
		}
		if r.status == http.StatusOK {
			counts[sec][k].ok++
		} else {
			counts[sec][k].denied++
		}
	}
	var b strings.Builder
	for sec := first; sec <= last && len(l.results) > 0; sec++ {
		fmt.Fprintf(&b, "%s", time.Unix(sec, 0).UTC().Format(time.TimeOnly))
		for _, e := range []string{"envoy-a", "envoy-b"} {
			b.WriteString(" | " + e)
			for _, k := range []string{"hot", "cold"} {
				c := counts[sec][e+" "+k]
				if c == nil {
					c = &cell{}
				}
				fmt.Fprintf(&b, " %s %d/%d", k, c.ok, c.denied)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestRLQSDayRule checks, through a real Envoy 1.40, the strategy pkg/rlqs sends for a share below one
// token a minute: a token bucket refilled once a day (fill_interval 86400 s). Envoy computes its rate in
// whole seconds, so a fill interval it mishandled would either divide by zero and admit every request (as a
// sub-second interval does) or never admit. Rule: api_key "slow", 3 a day; one Envoy with the shipped
// deploy/envoy-rlqs.yaml sends a request every 500 ms for 12 s. The first is decided by
// no_assignment_behavior (ALLOW_ALL) and subscribes; the assignment's new bucket starts full (the share's
// 2-token floor) and admits two more; the next report charges 3, the window is spent and the bucket is
// denied until it resets. So between 2 and L = 3 are admitted, and the rest denied.
func TestRLQSDayRule(t *testing.T) {
	t.Parallel()
	rulesDir := t.TempDir()
	writeAtomic(t, filepath.Join(rulesDir, "rules.yaml"), []byte(`domain: edge
descriptors:
  - key: api_key
    value: slow
    rate_limit: {unit: day, requests_per_unit: 3}
`))
	sc := startSidecar(t, "sidecar-day", sidecarOptions{Bin: sidecarBin, Rules: rulesDir})
	app := startUpstream(t)
	e := startEnvoy(t, envoyBin, "envoy-day", writeRLQSEnvoyConfig(t, t.TempDir(), port(t, app.Listener.Addr().String()), sc, sc),
		"--component-log-level", "rate_limit_quota:debug")

	const every, run, limit = 500 * time.Millisecond, 12 * time.Second, 3
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	load := &rlqsLoad{}
	load.start(ctx, t, e, "slow", every)
	<-ctx.Done()
	load.wait()
	if err := load.failure(); err != nil {
		t.Fatal(err)
	}
	sent, denied := load.denied("slow")
	admitted := sent - denied
	t.Logf("api_key slow (3 a day): %d requests, %d admitted, %d denied", sent, admitted, denied)
	if day := 24 * time.Hour; start.Truncate(day) != time.Now().Truncate(day) {
		t.Skip("the run straddled a day window's reset (00:00 UTC): two windows' limits apply")
	}
	if admitted < 2 || admitted > limit {
		t.Errorf("admitted %d, want 2 to %d: the day-fill token bucket admits its 2 tokens and the spent window denies the rest", admitted, limit)
	}
	if denied < sent-limit || sent < 15 {
		t.Errorf("%d of %d denied, want all but at most %d of at least 15", denied, sent, limit)
	}
}
