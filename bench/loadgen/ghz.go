package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
			"-D", data, "--disable-template-data", "-z", d.String(), "--format", "json", o.addr}
	}
	ghz := func(d time.Duration, out io.Writer) error {
		cmd := exec.CommandContext(ctx, o.ghz, args(d)...)
		cmd.Stdout, cmd.Stderr = out, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", o.ghz, err)
		}
		return nil
	}
	if o.warmup > 0 {
		if err := ghz(o.warmup, io.Discard); err != nil {
			return result.Load{}, err
		}
	}
	if o.marks {
		fmt.Fprintln(stderr, "mark start")
	}
	var out bytes.Buffer
	err = ghz(o.duration, &out)
	if o.marks {
		fmt.Fprintln(stderr, "mark end")
	}
	if err != nil {
		return result.Load{}, err
	}
	res, err := parseGhz(out.Bytes())
	if err != nil {
		return result.Load{}, err
	}
	res.Addr, res.Domain, res.Scenario, res.Concurrency, res.Conns, res.Keys = o.addr, o.domain, o.scenario, o.c, o.conns, o.keys
	res.WarmupS = o.warmup.Seconds()
	res.DescriptorsPerS = res.DecisionsPerS * float64(len(msgs[0].Descriptors))
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

// ghzReport is the part of ghz's JSON report (--format json) that parseGhz reads. Details holds every call, from
// which the latency quantiles are computed as bench/loadgen computes its own (ghz's summary has no p99.9).
type ghzReport struct {
	Count   uint64 `json:"count"`
	Total   int64  `json:"total"` // ns
	Details []struct {
		Latency int64  `json:"latency"` // ns
		Error   string `json:"error"`
		Status  string `json:"status"`
	} `json:"details"`
}

// cutByGhz reports whether a call failed because ghz closed its connection at the end of -z: such calls were cut
// by the end of the measured interval, which bench/loadgen does not count either.
func cutByGhz(err string) bool {
	return strings.Contains(err, "the client connection is closing") || strings.Contains(err, "use of closed network connection")
}

// parseGhz turns ghz's JSON report into a result.Load.
func parseGhz(b []byte) (result.Load, error) {
	var r ghzReport
	if err := json.Unmarshal(b, &r); err != nil {
		return result.Load{}, fmt.Errorf("ghz report: %w", err)
	}
	if r.Total <= 0 || len(r.Details) == 0 {
		return result.Load{}, errors.New("ghz report: no calls")
	}
	if uint64(len(r.Details)) != r.Count {
		return result.Load{}, fmt.Errorf("ghz report: %d calls but details of %d", r.Count, len(r.Details))
	}
	var res result.Load
	res.MeasuredS = time.Duration(r.Total).Seconds()
	var h hist.Histogram
	for _, d := range r.Details {
		if d.Status != "OK" && cutByGhz(d.Error) {
			continue
		}
		if d.Status != "OK" {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = d.Status + ": " + d.Error
			}
			continue
		}
		res.Calls++
		h.Record(uint64(max(d.Latency, 0)))
	}
	res.DecisionsPerS = float64(res.Calls) / res.MeasuredS
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	res.P50Us, res.P99Us, res.P999Us, res.MaxUs = us(h.Quantile(0.50)), us(h.Quantile(0.99)), us(h.Quantile(0.999)), us(h.Max())
	if h.Count() > 0 {
		res.MeanUs = h.Mean() / 1e3
	}
	return res, nil
}
