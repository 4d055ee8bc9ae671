package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// parseVmRSS returns the resident set size, in bytes, from the contents of /proc/<pid>/status.
func parseVmRSS(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("proc status: VmRSS %q: want \"N kB\"", strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc status: VmRSS: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("proc status: no VmRSS line (kernel thread or exited process)")
}

// parseIO returns rchar + wchar, the bytes read and written through system calls, from the contents of
// /proc/<pid>/io.
func parseIO(b []byte) (uint64, error) {
	var sum uint64
	var found int
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "rchar" && name != "wchar") {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc io: %s: %w", name, err)
		}
		sum += v
		found++
	}
	if found != 2 {
		return 0, errors.New("proc io: want rchar and wchar")
	}
	return sum, nil
}

// redisInfo is what the harness reads from Redis's INFO ALL.
type redisInfo struct {
	cpuSeconds float64           // used_cpu_sys + used_cpu_user, the server's own CPU time since start
	usedMemory uint64            // used_memory, bytes allocated by Redis
	calls      map[string]uint64 // commandstats calls per command name, e.g. "evalsha", "client|setinfo"
	// netBytes is total_net_input_bytes + total_net_output_bytes: what the server read from and wrote to its
	// clients (replication and the cluster bus are counted apart, or not at all).
	netBytes uint64
}

// add adds o's figures to i's, for the nodes of a cluster.
func (i *redisInfo) add(o redisInfo) {
	i.cpuSeconds += o.cpuSeconds
	i.usedMemory += o.usedMemory
	i.netBytes += o.netBytes
	for name, n := range o.calls {
		i.calls[name] += n
	}
}

// parseInfo reads the fields of redisInfo out of an INFO reply. Lines are "field:value", sections start with '#'.
func parseInfo(s string) (redisInfo, error) {
	info := redisInfo{calls: map[string]uint64{}}
	var haveCPU, haveMem int
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\r\n")
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return info, fmt.Errorf("redis info: %s: %w", name, err)
			}
			info.cpuSeconds += v
			haveCPU++
		case name == "used_memory":
			v, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return info, fmt.Errorf("redis info: used_memory: %w", err)
			}
			info.usedMemory = v
			haveMem++
		case name == "total_net_input_bytes" || name == "total_net_output_bytes":
			v, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return info, fmt.Errorf("redis info: %s: %w", name, err)
			}
			info.netBytes += v
		case strings.HasPrefix(name, "cmdstat_"):
			// cmdstat_get:calls=21,usec=175,usec_per_call=8.33,rejected_calls=0,failed_calls=0
			calls, ok := infoField(value, "calls")
			if !ok {
				return info, fmt.Errorf("redis info: %s has no calls=", name)
			}
			v, err := strconv.ParseUint(calls, 10, 64)
			if err != nil {
				return info, fmt.Errorf("redis info: %s calls: %w", name, err)
			}
			info.calls[strings.TrimPrefix(name, "cmdstat_")] = v
		}
	}
	if haveCPU != 2 || haveMem != 1 {
		return info, errors.New("redis info: missing used_cpu_sys, used_cpu_user or used_memory (want INFO ALL)")
	}
	return info, nil
}

// infoField returns the value of key in a comma-separated "k=v,k=v" list.
func infoField(list, key string) (string, bool) {
	for kv := range strings.SplitSeq(list, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// commandDelta returns the calls made between two commandstats samples per command, and their sum, leaving out
// the commands in exclude (the harness's own INFO). A command absent from before had made no calls yet.
func commandDelta(before, after map[string]uint64, exclude ...string) (map[string]uint64, uint64) {
	delta := map[string]uint64{}
	var sum uint64
	for name, n := range after {
		if slices.Contains(exclude, name) || n <= before[name] {
			continue
		}
		d := n - before[name]
		delta[name] = d
		sum += d
	}
	return delta, sum
}

// sumMetric adds up every sample of the metric called name in a Prometheus text exposition, whatever its labels.
// It reports false when there is no such sample, so a missing counter reads "n/a" rather than 0.
func sumMetric(text, name string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" {
			continue
		}
		switch rest[0] {
		case '{':
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		case ' ', '\t':
		default:
			continue // a longer name such as name_created
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(v) {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// median returns the median of xs, ignoring NaN (a figure a run could not measure). It returns NaN when no
// value is left.
func median(xs []float64) float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
