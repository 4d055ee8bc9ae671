package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// recordingGauge is a gauge that also reports each Set.
type recordingGauge struct {
	prometheus.Gauge
	sets chan float64
}

func (g recordingGauge) Set(v float64) {
	g.Gauge.Set(v)
	select {
	case g.sets <- v:
	default:
	}
}

func TestStartClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)

	// A port nothing listens on: the first sync fails.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := l.Addr().String()
	l.Close()

	for _, tt := range []struct {
		name     string
		addr     string
		interval time.Duration
		offsets  bool   // the offset gauge is set
		log      string // a message that must be logged
	}{
		{"synced", srv.Addr, time.Minute, true, "clock synced with redis"},
		{"redis down at start", deadAddr, time.Minute, false, "using this host's clock until a sync succeeds"},
		{"off", srv.Addr, 0, false, "clock sync off"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := redis.NewClient(&redis.Options{Addr: tt.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
			t.Cleanup(func() { client.Close() })
			core, logs := observer.New(zapcore.InfoLevel)
			g := recordingGauge{newClockOffsetGauge(), make(chan float64, 10)}
			now, stop, err := startClock(context.Background(), client, tt.interval, zap.New(core), g)
			if err != nil {
				t.Fatalf("startClock: %v", err)
			}
			defer stop()
			// redis-server runs on this host: its clock is ours.
			if d := time.Until(now()); d < -50*time.Millisecond || d > 50*time.Millisecond {
				t.Errorf("now() is %v from time.Now, want within 50ms", d)
			}
			if got := len(g.sets) > 0; got != tt.offsets {
				t.Errorf("offset reported = %v, want %v", got, tt.offsets)
			}
			if logs.FilterMessageSnippet(tt.log).Len() == 0 {
				t.Errorf("no log %q; got %v", tt.log, logs.All())
			}
		})
	}
}

// TestStartClockClusterAsksOneNode checks that every TIME of a cluster
// client goes to one master, so all replicas read the same clock.
func TestStartClockClusterAsksOneNode(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	now, stop, err := startClock(ctx, cluster.Client(t), time.Minute, zap.NewNop(), nil)
	if err != nil {
		t.Fatalf("startClock: %v", err)
	}
	defer stop()
	if d := time.Until(now()); d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("now() is %v from time.Now, want within 50ms", d)
	}
	var calls []int64
	asked := 0
	for i := range cluster.Addrs {
		st, err := cluster.Node(i).CommandStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, st["time"])
		if st["time"] > 0 {
			asked++
		}
	}
	if asked != 1 {
		t.Errorf("TIME calls per master = %v, want all on one", calls)
	}
}

func TestStartClockRejectsNegativeInterval(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { client.Close() })
	if _, _, err := startClock(context.Background(), client, -time.Second, zap.NewNop(), nil); err == nil {
		t.Error("startClock(-1s) = nil error, want one")
	}
}
