//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"
)

// envoyTemplate renders an Envoy bootstrap that mirrors deploy/envoy.yaml.
var envoyTemplate = template.Must(template.ParseFiles(filepath.Join("testdata", "envoy.yaml.tmpl")))

// envoyParams are the parts of deploy/envoy.yaml that a test bootstrap may
// change. Port 0 lets the kernel pick.
type envoyParams struct {
	AdminPort       int
	ListenAddr      string // ingress and health listeners
	IngressPort     int
	HealthPort      int
	AppPort         int // upstream on 127.0.0.1
	RLSPort         int // ratelimit sidecar on 127.0.0.1
	Domain          string
	Timeout         string // the filter timeout, as Envoy's YAML wants it ("0.05s")
	FailureModeDeny bool
	// RetryAfterHeader sets Envoy 1.40's enable_retry_after_header.
	RetryAfterHeader bool
}

func renderEnvoyConfig(p envoyParams) ([]byte, error) {
	var b bytes.Buffer
	if err := envoyTemplate.Execute(&b, p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeEnvoyConfig renders p into dir/envoy.yaml and checks it with
// `envoy --mode validate`.
func writeEnvoyConfig(t *testing.T, envoyBin, dir string, p envoyParams) string {
	t.Helper()
	return writeEnvoyTemplate(t, envoyBin, dir, envoyTemplate, p)
}

// writeEnvoyTemplate renders tmpl with p (its parameters, such as an
// envoyParams) into dir/envoy.yaml and checks it
// with `envoy --mode validate`.
func writeEnvoyTemplate(t *testing.T, envoyBin, dir string, tmpl *template.Template, p any) string {
	t.Helper()
	var b bytes.Buffer
	if err := tmpl.Execute(&b, p); err != nil {
		t.Fatalf("render envoy config: %v", err)
	}
	return writeEnvoyFile(t, envoyBin, dir, b.Bytes())
}

// writeEnvoyFile writes cfg to dir/envoy.yaml and checks it with
// `envoy --mode validate`.
func writeEnvoyFile(t *testing.T, envoyBin, dir string, cfg []byte) string {
	t.Helper()
	path := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(envoyBin, "--mode", "validate", "-c", path, "-l", "warning").CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate %s: %v\n%s\n--- config ---\n%s", path, err, out, cfg)
	}
	return path
}

// envoy is one Envoy process with its admin and ingress addresses, and a
// ledger of the ratelimit filter outcomes its test requests showed.
type envoy struct {
	*proc
	Name     string
	Admin    string // host:port
	Listener string // host:port of the ingress listener

	mu     sync.Mutex
	ledger map[string]int // stat suffix ("ok", "over_limit", ...) -> count
}

// startEnvoy starts Envoy on config, with more command-line args if
// given, and waits until the admin answers /ready and the ingress listener
// accepts connections. The listener is probed with a bare TCP connect, so
// no request reaches the filter.
func startEnvoy(t *testing.T, envoyBin, name, config string, args ...string) *envoy {
	t.Helper()
	dir := filepath.Dir(config)
	addrFile := filepath.Join(dir, "admin.addr")
	p := startProc(t, name, envoyBin, append([]string{
		"-c", config,
		"--use-dynamic-base-id",
		"--concurrency", "1",
		"-l", "warning",
		"--admin-address-path", addrFile,
	}, args...)...)
	e := &envoy{proc: p, Name: name, ledger: map[string]int{}}
	deadline := time.Now().Add(startTimeout)
	for e.Admin == "" {
		if p.Exited() {
			t.Fatalf("%s exited at start: %v", name, p.Wait())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: admin address not written to %s in %v", name, addrFile, startTimeout)
		}
		if b, err := os.ReadFile(addrFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			e.Admin = string(bytes.TrimSpace(b))
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitHTTP(t, name+" admin /ready", "http://"+e.Admin+"/ready", p, deadline)

	var listeners struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(e.adminGet(t, "/listeners?format=json")), &listeners); err != nil {
		t.Fatalf("%s: /listeners: %v", name, err)
	}
	for _, l := range listeners.ListenerStatuses {
		if l.Name == "ingress" {
			sa := l.LocalAddress.SocketAddress
			e.Listener = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
		}
	}
	if e.Listener == "" {
		t.Fatalf("%s: no ingress listener in /listeners", name)
	}
	for {
		c, err := net.DialTimeout("tcp", e.Listener, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: ingress %s: %v", name, e.Listener, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// adminGet returns the body of GET path on the admin port.
func (e *envoy) adminGet(t *testing.T, path string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + e.Admin + path)
	if err != nil {
		t.Fatalf("%s admin GET %s: %v", e.Name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s admin GET %s: %s %v\n%s", e.Name, path, resp.Status, err, b)
	}
	return string(b)
}

// counters returns the admin's /stats?filter=... counters and gauges as
// name -> value.
func (e *envoy) counters(t *testing.T, filter string) map[string]int {
	t.Helper()
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(e.adminGet(t, "/stats?filter="+filter)))
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(v); err == nil {
			out[name] = n
		}
	}
	return out
}

// record adds one response to the ledger, as the ratelimit filter must
// have counted it: a 429 with x-envoy-ratelimited was over_limit; a 200
// with x-ratelimit-limit carried a decision (ok); a 200 without it passed
// because the service failed (error and failure_mode_allowed); a 500 was
// denied because it failed (error).
func (e *envoy) record(r *result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case r.Status == http.StatusTooManyRequests && r.Header.Get("x-envoy-ratelimited") == "true":
		e.ledger["over_limit"]++
	case r.Status == http.StatusOK && r.Header.Get("x-ratelimit-limit") != "":
		e.ledger["ok"]++
	case r.Status == http.StatusOK:
		e.ledger["error"]++
		e.ledger["failure_mode_allowed"]++
	case r.Status == http.StatusInternalServerError:
		e.ledger["error"]++
	default:
		e.ledger["unexpected"]++
	}
}

func (e *envoy) ledgerCopy() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := make(map[string]int, len(e.ledger))
	for k, v := range e.ledger {
		m[k] = v
	}
	return m
}

// result is one response seen by a client.
type result struct {
	Envoy  string
	Status int
	Header http.Header
	Body   []byte
	Took   time.Duration
}

func (r *result) String() string {
	return fmt.Sprintf("%s: %d %q (x-ratelimit-limit %q, -remaining %q, -reset %q, retry-after %q, in %v)",
		r.Envoy, r.Status, r.Body, r.Header.Get("x-ratelimit-limit"), r.Header.Get("x-ratelimit-remaining"),
		r.Header.Get("x-ratelimit-reset"), r.Header.Get("retry-after"), r.Took.Round(time.Microsecond))
}
