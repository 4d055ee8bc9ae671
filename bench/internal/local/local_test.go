package local

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFreePortsDistinct(t *testing.T) {
	t.Parallel()
	ports, err := FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want 4 distinct", ports)
		}
		seen[p] = true
	}
	if a := Addr(ports[0]); !strings.HasPrefix(a, "127.0.0.1:") {
		t.Errorf("Addr = %q", a)
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("body"))
	}))
	defer srv.Close()
	if b, err := Get(context.Background(), srv.URL+"/ok"); err != nil || b != "body" {
		t.Errorf("Get /ok = %q, %v", b, err)
	}
	if _, err := Get(context.Background(), srv.URL+"/down"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Get /down: err %v, want the status", err)
	}
}
