package redisstore

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

func TestSlot(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3}, // the CRC-16/XMODEM check value; below 16384
		{"foo", 12182},
		{"{123456789}.x", 0x31C3},
		{"a{123456789}:60000:0", 0x31C3},
		{"foo{}{123456789}", slot("foo{}{123456789}")},
		{"x{{bar}}", slot("{bar")},
		{"x{bar}{zap}", slot("bar")},
	} {
		if got := slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	if slot("foo{}{123456789}") == 0x31C3 {
		t.Errorf("Slot(%q) used the tag after an empty one", "foo{}{123456789}")
	}
}

func TestClusterSlotMatchesRedis(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	cc := clusterClient(t, c)
	for _, key := range []string{"123456789", "foo", "ratelimit:{edge|api_key=alice}:60000:0", "x{{bar}}", "foo{}{bar}"} {
		want, err := cc.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, want %d (CLUSTER KEYSLOT)", key, got, want)
		}
	}
}
