package local

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAddr(t *testing.T) {
	t.Parallel()
	if a := Addr(8081); a != "127.0.0.1:8081" {
		t.Errorf("Addr(8081) = %q, want 127.0.0.1:8081", a)
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
