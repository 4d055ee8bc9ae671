package main

import (
	"maps"
	"math"
	"testing"
)

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  string
		want    uint64
		wantErr bool
	}{
		{"present", "Name:\tx\nVmPeak:\t  9999 kB\nVmRSS:\t   20480 kB\nRssAnon:\t  100 kB\n", 20480 * 1024, false},
		{"missing", "Name:\tkworker\nState:\tI (idle)\n", 0, true},
		{"bad unit", "VmRSS:\t 20 MB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseVmRSS([]byte(tt.status))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseVmRSS() = %d, %v, want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

const infoSample = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n\r\n" +
	"# Stats\r\ntotal_net_input_bytes:300\r\ntotal_net_output_bytes:45\r\ntotal_net_repl_input_bytes:7\r\n\r\n# CPU\r\n" +
	"used_cpu_sys:1.250000\r\nused_cpu_user:0.750000\r\nused_cpu_sys_children:9.000000\r\n\r\n" +
	"# Commandstats\r\ncmdstat_info:calls=4,usec=400,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_evalsha:calls=1000,usec=9000,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
	"# Keyspace\r\ndb0:keys=3,expires=3,avg_ttl=1000\r\n"

func TestParseInfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		info      string
		wantCPU   float64
		wantMem   uint64
		wantCalls map[string]uint64
		wantNet   uint64
		wantErr   bool
	}{
		{"sample", infoSample, 2.0, 1048576, map[string]uint64{"info": 4, "evalsha": 1000, "client|setinfo": 2}, 345, false},
		{"no cpu section", "# Memory\nused_memory:5\n", 0, 5, map[string]uint64{}, 0, true},
		{"bad calls", infoSample + "cmdstat_get:calls=x,usec=1\r\n", 2.0, 1048576, nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseInfo(tt.info)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseInfo() error %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.netBytes != tt.wantNet {
				t.Errorf("parseInfo() net bytes %d, want %d", got.netBytes, tt.wantNet)
			}
			if math.Abs(got.cpuSeconds-tt.wantCPU) > 1e-9 || got.usedMemory != tt.wantMem || !maps.Equal(got.calls, tt.wantCalls) {
				t.Errorf("parseInfo() = %v, %d, %v, want %v, %d, %v",
					got.cpuSeconds, got.usedMemory, got.calls, tt.wantCPU, tt.wantMem, tt.wantCalls)
			}
		})
	}
}

func TestCommandDelta(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		before, after map[string]uint64
		want          map[string]uint64
		wantSum       uint64
	}{
		{"info excluded, new command counted",
			map[string]uint64{"info": 3, "evalsha": 10},
			map[string]uint64{"info": 5, "evalsha": 110, "eval": 1},
			map[string]uint64{"evalsha": 100, "eval": 1}, 101},
		{"unchanged left out", map[string]uint64{"get": 7}, map[string]uint64{"get": 7}, map[string]uint64{}, 0},
		{"counter reset is not negative", map[string]uint64{"get": 7}, map[string]uint64{"get": 2}, map[string]uint64{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, sum := commandDelta(tt.before, tt.after, "info")
			if !maps.Equal(got, tt.want) || sum != tt.wantSum {
				t.Errorf("commandDelta() = %v, %d, want %v, %d", got, sum, tt.want, tt.wantSum)
			}
		})
	}
}

func TestSumMetric(t *testing.T) {
	t.Parallel()
	const text = `# HELP ratelimit_store_round_trips_total Round trips to the store.
# TYPE ratelimit_store_round_trips_total counter
ratelimit_store_round_trips_total{store="redis",op="check"} 1200
ratelimit_store_round_trips_total{store="redis",op="load"} 3 1700000000000
ratelimit_store_round_trips_total_created{store="redis"} 1.7e9
ratelimit_store_round_trips 99
go_goroutines 12
`
	tests := []struct {
		name   string
		text   string
		metric string
		want   float64
		found  bool
	}{
		{"labelled series summed, longer names ignored", text, "ratelimit_store_round_trips_total", 1203, true},
		{"unlabelled", text, "go_goroutines", 12, true},
		{"absent", text, "ratelimit_requests_total", 0, false},
		{"empty", "", "x", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, found := sumMetric(tt.text, tt.metric)
			if got != tt.want || found != tt.found {
				t.Errorf("sumMetric(%q) = %v, %v, want %v, %v", tt.metric, got, found, tt.want, tt.found)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"odd unsorted", []float64{30, 10, 20}, 20},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"one", []float64{7}, 7},
		{"nan ignored", []float64{nan, 5, 1, nan, 3}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := median(tt.xs); got != tt.want {
				t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
			}
		})
	}
	for _, xs := range [][]float64{nil, {nan, nan}} {
		if got := median(xs); !math.IsNaN(got) {
			t.Errorf("median(%v) = %v, want NaN", xs, got)
		}
	}
}

func TestParseIO(t *testing.T) {
	t.Parallel()
	const sample = "rchar: 1200\nwchar: 34\nsyscr: 5\nsyscw: 6\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
	if got, err := parseIO([]byte(sample)); got != 1234 || err != nil {
		t.Errorf("parseIO() = %d, %v, want 1234, nil", got, err)
	}
	if got, err := parseIO([]byte("rchar: 1\n")); err == nil {
		t.Errorf("parseIO(no wchar) = %d, nil, want an error", got)
	}
}

func TestRedisInfoAdd(t *testing.T) {
	t.Parallel()
	sum := redisInfo{calls: map[string]uint64{}}
	sum.add(redisInfo{cpuSeconds: 1, usedMemory: 10, netBytes: 100, calls: map[string]uint64{"evalsha": 3}})
	sum.add(redisInfo{cpuSeconds: 0.5, usedMemory: 5, netBytes: 50, calls: map[string]uint64{"evalsha": 1, "ping": 2}})
	want := redisInfo{cpuSeconds: 1.5, usedMemory: 15, netBytes: 150, calls: map[string]uint64{"evalsha": 4, "ping": 2}}
	if sum.cpuSeconds != want.cpuSeconds || sum.usedMemory != want.usedMemory || sum.netBytes != want.netBytes || !maps.Equal(sum.calls, want.calls) {
		t.Errorf("sum of two nodes = %+v, want %+v", sum, want)
	}
}
