package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/hist"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

// runGhz sends the scenario's requests with ghz (o.ghz) instead of this program's own calls, for figures
// comparable with those measured with ghz elsewhere. ghz gets the same requests, round-robin, as a JSON array,
// and the service's descriptors as a protoset, both written to a temporary directory. The warm-up is a ghz run of
// its own; the measured interval is a second run, between the marks. ghz's report holds no response contents, so
// calls are only told apart by their gRPC status: OK counts as a call, anything else as an error, and OK and OVER_LIMIT
// are not told apart.
func runGhz(ctx context.Context, o options, stderr io.Writer) (result.Load, error) {
	msgs, err := buildMessages(o.scenario, o.domain, o.keys)
	if err != nil {
		return result.Load{}, err
	}
	dir, err := os.MkdirTemp("", "loadgen-ghz-")
	if err != nil {
		return result.Load{}, err
	}
	defer os.RemoveAll(dir)
	data, protoset := filepath.Join(dir, "data.json"), filepath.Join(dir, "rls.protoset")
	if err := writeGhzData(data, msgs); err != nil {
		return result.Load{}, err
	}
	if err := writeProtoset(protoset, rlsv3.File_envoy_service_ratelimit_v3_rls_proto); err != nil {
		return result.Load{}, err
	}
	args := func(d time.Duration) []string {
		return []string{"--insecure", "--protoset", protoset,
			"--call", "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit",
			"-c", strconv.Itoa(o.c), "--connections", strconv.Itoa(o.conns), "-t", o.timeout.String(),
			"-D", data, "--disable-template-data", "-z", d.String(), "--duration-stop", "ignore",
			"--format", "json", o.addr}
	}
	// ghz runs ghz for d. With mark, the marks bracket d itself: ghz writes its report for seconds after d is
	// up, and the harness's samples of the server and Redis must not take that in. It returns ghz's CPU time.
	ghz := func(d time.Duration, out io.Writer, mark bool) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, o.ghz, args(d)...)
		cmd.Stdout, cmd.Stderr = out, stderr
		start := time.Now()
		if mark {
			fmt.Fprintln(stderr, "mark start")
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("%s: %w", o.ghz, err)
		}
		running, exited := context.WithCancel(ctx)
		defer exited()
		waited := make(chan error, 1)
		go func() {
			waited <- cmd.Wait()
			exited() // an early exit ends the wait for the end mark
		}()
		if mark {
			markAt(running, start.Add(d), stderr, "mark end")
		}
		if err := <-waited; err != nil {
			return 0, fmt.Errorf("%s: %w", o.ghz, err)
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
	}
	if o.warmup > 0 {
		if _, err := ghz(o.warmup, io.Discard, false); err != nil {
			return result.Load{}, err
		}
	}
	var out bytes.Buffer
	cpu, err := ghz(o.duration, &out, o.marks)
	if err != nil {
		return result.Load{}, err
	}
	res := o.load()
	if err := parseGhz(out.Bytes(), &res, len(msgs[0].Descriptors)); err != nil {
		return result.Load{}, err
	}
	res.ChildCPUS = cpu.Seconds()
	return res, nil
}

// writeGhzData writes msgs as the JSON array ghz sends round-robin.
func writeGhzData(path string, msgs []*rlsv3.RateLimitRequest) error {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		j, err := protojson.Marshal(m)
		if err != nil {
			return fmt.Errorf("request %d to JSON: %w", i, err)
		}
		b.Write(j)
	}
	b.WriteByte(']')
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// writeProtoset writes fd and every file it imports, transitively, as a FileDescriptorSet, dependencies first.
func writeProtoset(path string, fd protoreflect.FileDescriptor) error {
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(fd)
	b, err := proto.Marshal(&set)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ghzReport is the part of ghz's JSON report (--format json) that parseGhz reads. Calls cut by the end of -z
// are not in it (--duration-stop ignore), as bench/loadgen does not count them either.
type ghzReport struct {
	Count  uint64            `json:"count"`
	Total  int64             `json:"total"` // ns
	Status map[string]uint64 `json:"statusCodeDistribution"`
	Errors map[string]uint64 `json:"errorDistribution"`
	// Details are the calls one by one, for latencies computed as bench/loadgen computes its own (ghz's summary
	// has no p99.9). ghz keeps at most its first million.
	Details []struct {
		Latency int64  `json:"latency"` // ns
		Status  string `json:"status"`
	} `json:"details"`
}

// parseGhz fills res from ghz's JSON report: counts from its totals, latencies from the answered calls among
// its details.
func parseGhz(b []byte, res *result.Load, descriptors int) error {
	var r ghzReport
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("ghz report: %w", err)
	}
	if r.Total <= 0 || r.Count == 0 || len(r.Details) == 0 {
		return errors.New("ghz report: no calls")
	}
	res.MeasuredS = time.Duration(r.Total).Seconds()
	res.Calls = r.Status["OK"]
	res.Errors = r.Count - res.Calls
	if len(r.Errors) > 0 {
		res.FirstError = slices.Min(slices.Collect(maps.Keys(r.Errors))) // one of them; ghz does not say which came first
	}
	var h hist.Histogram
	for _, d := range r.Details {
		if d.Status == "OK" {
			h.Record(uint64(max(d.Latency, 0)))
		}
	}
	res.Finish(&h, descriptors)
	return nil
}
