package redisstore

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func TestShortCallOnlyForPlainCounters(t *testing.T) {
	t.Parallel()
	base := window.Counter{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1}
	other := window.Counter{Key: "t:{o}", Limit: 5, Size: time.Minute, Hits: 1}
	longer := window.Counter{Key: "t:{k}", Limit: 5, Size: time.Hour, Hits: 1}
	tests := []struct {
		name    string
		reqs    []window.Counter
		short   bool
		triples int // distinct (limit, hits, TTL) in the short form
		shared  int // keys that several counters use
	}{
		{"one fixed counter", []window.Counter{base}, true, 1, 0},
		{"hits above one", []window.Counter{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 3}}, true, 1, 0},
		{"two counters, one rule", []window.Counter{base, other}, true, 1, 0},
		{"one descriptor, two windows", []window.Counter{base, longer}, true, 2, 0},
		{"the same counter twice", []window.Counter{base, other, base}, false, 0, 1},
		{"shadow", []window.Counter{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Shadow: true}}, false, 0, 0},
		{"refund request", []window.Counter{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Refund: true}}, false, 0, 0},
		{"charge", []window.Counter{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 600, Charge: true}}, false, 0, 0},
		{"check only (hits 0)", []window.Counter{{Key: "t:{k}", Limit: 5, Size: time.Minute}}, false, 0, 0},
		{"sliding window", []window.Counter{{Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Algorithm: window.SlidingWindow}}, false, 0, 0},
		{"a plain counter and a shadow", []window.Counter{other, {Key: "t:{k}", Limit: 5, Size: time.Minute, Hits: 1, Shadow: true}}, false, 0, 0},
	}
	for _, tt := range tests {
		if got := newTake(0, tt.reqs, nil).short; got != tt.short {
			t.Errorf("%s: short form %v, want %v", tt.name, got, tt.short)
		}
		call := callArgs(1_763_800_035_000, tt.reqs, nil)
		// After EVALSHA, the hash, the key count and the keys: the counts of
		// triples and of shared keys, the request, the triples, the shared
		// keys' planned hits.
		args := call[3+call[2].(int):]
		n := len(tt.reqs)
		wantHead, wantLen := n, 3+5*n+tt.shared
		if tt.short {
			wantHead, wantLen = -n, 3+n+3*tt.triples
		}
		if args[0] != any(tt.triples) || args[1] != any(tt.shared) || args[2] != any(wantHead) || len(args) != wantLen {
			t.Errorf("%s: arguments %v, want %d values: %d triples, %d shared keys, then a request headed %d",
				tt.name, args, wantLen, tt.triples, tt.shared, wantHead)
		}
	}
}

// TestTriples: equal triples share a number and new ones get the next,
// past the point where number stops scanning and indexes; a call's triples
// come out in number order, and the next call starts from 1 again.
func TestTriples(t *testing.T) {
	t.Parallel()
	var tr triples
	for call := range 2 {
		const distinct = 3 * triplesScanned
		var want []any
		for i := range distinct {
			r := &window.Counter{Limit: 100, Hits: uint64(i + 1), Size: time.Second}
			if got := tr.number(r); got != i+1 {
				t.Fatalf("call %d: triple %d numbered %d, want %d", call, i, got, i+1)
			}
			want = append(want, r.Limit, r.Hits, r.TTL().Milliseconds())
		}
		for i := distinct - 1; i >= 0; i-- { // again, from both sides of the switch to the index
			if got := tr.number(&window.Counter{Limit: 100, Hits: uint64(i + 1), Size: time.Second}); got != i+1 {
				t.Fatalf("call %d: triple %d again numbered %d, want %d", call, i, got, i+1)
			}
		}
		dst := tr.appendTo([]any{"head"}, 0)
		if dst[0] != any(distinct) || fmt.Sprint(dst[1:]) != fmt.Sprint(want) {
			t.Fatalf("call %d: appendTo = %v, want count %d then %v", call, dst, distinct, want)
		}
	}
}

// TestShortFormDecidesAsTheFullForm runs the same call against the same
// counter states in both of the script's forms, on a real Redis, and wants
// the same decision, the same Results and the same counters afterwards.
func TestShortFormDecidesAsTheFullForm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_763_800_035_000)
	w := window.At(now, time.Minute)
	// A counter: its value before the call ("" missing, "x" not an
	// integer) and the hits the call takes; every limit is 5.
	type counter struct {
		before string
		hits   uint64
	}
	cases := [][]counter{
		{{"", 1}}, {{"", 5}}, {{"", 6}}, {{"3", 1}}, {{"3", 2}}, {{"3", 3}}, {{"5", 1}}, {{"9", 1}}, {{"x", 1}},
		{{"", 1}, {"", 1}, {"", 1}},   // all counted
		{{"4", 1}, {"", 1}, {"2", 3}}, // all exactly full after
		{{"", 1}, {"5", 1}, {"2", 1}}, // the middle one denies: none counted, the new first one not left
		{{"5", 1}, {"", 2}, {"9", 1}}, // two deny
		{{"", 1}, {"x", 1}, {"", 1}},  // a corrupt key fails the call: nothing written
		{{"2", 1}, {"", 6}},           // hits above the limit on a new key
	}
	type outcome struct {
		allowed bool
		failed  bool
		res     []window.Result
		after   []string
		ttl     []time.Duration
	}
	for i, counters := range cases {
		var got [2]outcome
		for form := range 2 {
			reqs := make([]window.Counter, len(counters))
			for j, c := range counters {
				key := fmt.Sprintf("t:{%d-%d-%d}", i, form, j)
				if c.before != "" {
					full := string(window.AppendWindow([]byte(key), w))
					if err := client.Set(ctx, full, c.before, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
				}
				reqs[j] = window.Counter{Key: key, Limit: 5, Size: time.Minute, Hits: c.hits}
			}
			args := callArgs(now.UnixMilli(), reqs, nil)
			if form == 1 { // the same call in the full form: no triples or shared keys, flags 0, weight 0
				args = append(args[:3+len(reqs)], 0, 0, len(reqs))
				for _, r := range reqs {
					args = append(args, r.Limit, r.Hits, r.TTL().Milliseconds(), 0, 0)
				}
			}
			o := &got[form]
			o.res = make([]window.Result, len(reqs))
			v, err := s.script(ctx, args)
			if err == nil {
				o.allowed, err = parseTake(v, &take{reqs: reqs}, o.res)
			}
			o.failed = err != nil
			for _, r := range reqs {
				full := string(window.AppendWindow([]byte(r.Key), w))
				after, _ := client.Get(ctx, full).Result()
				o.after = append(o.after, after)
				o.ttl = append(o.ttl, client.TTL(ctx, full).Val().Round(time.Minute))
			}
		}
		short, full := got[0], got[1]
		if short.failed != full.failed || short.allowed != full.allowed ||
			!short.failed && fmt.Sprint(short.res) != fmt.Sprint(full.res) ||
			fmt.Sprint(short.after, short.ttl) != fmt.Sprint(full.after, full.ttl) {
			t.Errorf("case %d %v:\nshort form %+v\nfull form  %+v", i, counters, short, full)
		}
	}
}

// TestFlagsMatchTheScript: the flag values the Go side sends are those
// take.lua names.
func TestFlagsMatchTheScript(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{"SHADOW": flagShadow, "REFUND": flagRefund, "SLIDING": flagSliding, "CHARGE": flagCharge, "TOKEN": flagToken, "LOG": flagLog} {
		m := regexp.MustCompile(`(?m)^local ` + name + ` = (\d+)`).FindStringSubmatch(takeSource)
		if m == nil || m[1] != strconv.Itoa(want) {
			t.Errorf("take.lua: %s = %v, want %d", name, m, want)
		}
	}
}

// TestTakeAssembly pins how the take script is put together: take.lua's
// head, then one section per window.Algorithm in its order, each starting
// with the comment that names it and registering itself in ALGORITHMS
// under the flag the Go side sends, then run.lua; crossSource runs the
// same script behind cross.lua's head.
func TestTakeAssembly(t *testing.T) {
	t.Parallel()
	algFlag := map[window.Algorithm]string{window.FixedWindow: "0", window.SlidingWindow: "SLIDING", window.TokenBucket: "TOKEN", window.SlidingLog: "LOG"}
	want := takeHead
	for a := range window.Algorithm(len(takeSections)) {
		sec := takeSections[a]
		name := strings.ReplaceAll(a.String(), "_", " ")
		if !strings.HasPrefix(sec, "-- The "+name+"'s section of take.lua") {
			t.Errorf("section %d starts %.40q, want the %s's", a, sec, name)
		}
		if flag, ok := algFlag[a]; !ok || strings.Count(sec, "ALGORITHMS["+flag+"] = {") != 1 {
			t.Errorf("section of %v does not register itself once as ALGORITHMS[%s]", a, flag)
		}
		want += sec
	}
	if len(algFlag) != len(takeSections) {
		t.Errorf("%d sections for %d algorithms", len(takeSections), len(algFlag))
	}
	want += takeRun
	if takeSource != want {
		t.Error("takeSource is not take.lua + the sections in Algorithm order + run.lua")
	}
	if takeHash != redis.NewScript(want).Hash() || crossSource != crossHead+want {
		t.Error("takeHash or crossSource is not of the assembled script")
	}
	if n := len(regexp.MustCompile(`(?m)^ALGORITHMS\[\w+\] = \{`).FindAllString(takeSource, -1)); n != len(takeSections) {
		t.Errorf("%d algorithms registered in the script, want %d, one per section", n, len(takeSections))
	}
}
