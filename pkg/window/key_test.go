package window

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// entry is one key/value pair of a descriptor, in request order.
type entry struct {
	Key   string
	Value string
}

// appendKey appends the key of a descriptor with the given entries, built
// piece by piece as AppendKeyHead describes.
func appendKey(dst []byte, prefix, domain string, entries []entry, qualifier string) []byte {
	dst = AppendKeyHead(dst, prefix, domain)
	for _, e := range entries {
		dst = AppendKeyEntry(dst, e.Key, e.Value)
	}
	if qualifier != "" {
		dst = AppendKeyQualifier(dst, qualifier)
	}
	return AppendKeyEnd(dst)
}

func TestAppendKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		domain    string
		entries   []entry
		qualifier string
		want      string
	}{
		{"one entry", "edge", []entry{{"api_key", "alice"}}, "", "ratelimit:{edge|api_key=alice}"},
		{"nested", "edge", []entry{{"api_key", "alice"}, {"path", "/v1/x"}}, "", "ratelimit:{edge|api_key=alice|path=/v1/x}"},
		{"empty value", "edge", []entry{{"k", ""}}, "", "ratelimit:{edge|k=}"},
		{"separators escaped", "d|x", []entry{{"a=b", "c:d}{%|"}}, "", "ratelimit:{d%7Cx|a%3Db=c%3Ad%7D%7B%25%7C}"},
		{"control bytes escaped", "d", []entry{{"k", "a\nb\x7f"}}, "", "ratelimit:{d|k=a%0Ab%7F}"},
		{"unicode verbatim", "d", []entry{{"user", "zoë"}}, "", "ratelimit:{d|user=zoë}"},
		{"qualifier", "edge", []entry{{"api_key", "alice"}}, "override", "ratelimit:{edge|api_key=alice|!override}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(appendKey(nil, "ratelimit", tt.domain, tt.entries, tt.qualifier))
			if got != tt.want {
				t.Errorf("AppendKey = %q, want %q", got, tt.want)
			}
		})
	}
	got := string(AppendWindow([]byte("ratelimit:{edge|api_key=alice}"), Window{Start: 1_763_800_020_000, Size: 60_000}))
	if want := "ratelimit:{edge|api_key=alice}:60000:1763800020000"; got != want {
		t.Errorf("AppendWindow = %q, want %q", got, want)
	}
}

func TestCheckPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"ratelimit", "rl:prod", ""} {
		if err := CheckPrefix(p); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"a{b", "x}"} {
		if err := CheckPrefix(p); err == nil {
			t.Errorf("CheckPrefix(%q) = nil, want an error", p)
		}
	}
}

// hashTag returns what Redis Cluster hashes: the bytes between the first '{'
// and the first '}' after it, when that is not empty.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// algorithms are every Algorithm, for the fuzz tests to pick from.
var algorithms = []Algorithm{FixedWindow, SlidingWindow}

// parseCounter inverts AppendKeyCounter: c is what follows the hash tag up to
// the window, with its '!'.
func parseCounter(c string) (index int, a Algorithm, err error) {
	if c == "" {
		return 0, FixedWindow, nil
	}
	rest, ok := strings.CutPrefix(c, "!")
	if !ok || rest == "" {
		return 0, 0, fmt.Errorf("bad counter %q", c)
	}
	if head, tail, ok := strings.Cut(rest, ","); ok || rest[0] >= '0' && rest[0] <= '9' {
		if !ok {
			head, tail = rest, FixedWindow.String()
		}
		if head == "" || head[0] == '0' || head[0] == '-' {
			return 0, 0, fmt.Errorf("counter %q has a non-canonical index", c)
		}
		if index, err = strconv.Atoi(head); err != nil {
			return 0, 0, err
		}
		if ok && tail == FixedWindow.String() {
			return 0, 0, fmt.Errorf("counter %q names the fixed window", c)
		}
		rest = tail
	} else if rest == FixedWindow.String() {
		return 0, 0, fmt.Errorf("counter %q names the fixed window alone", c)
	}
	for _, a := range algorithms {
		if a.String() == rest {
			return index, a, nil
		}
	}
	return 0, 0, fmt.Errorf("counter %q names no algorithm", c)
}

// parseKey inverts AppendKey+AppendKeyCounter+AppendWindow; the round trip
// in FuzzKey and FuzzKeyCounter proves the encoding injective.
func parseKey(key string) (domain string, entries []entry, qualifier string, index int, a Algorithm, w Window, err error) {
	open := strings.IndexByte(key, '{')
	end := strings.IndexByte(key, '}')
	if open < 0 || end < open {
		return "", nil, "", 0, 0, w, fmt.Errorf("no hash tag in %q", key)
	}
	parts := strings.Split(key[open+1:end], "|")
	unesc := func(s string) (string, error) {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if s[i] != '%' {
				b.WriteByte(s[i])
				continue
			}
			if i+2 >= len(s) {
				return "", fmt.Errorf("short escape in %q", s)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", err
			}
			b.WriteByte(byte(v))
			i += 2
		}
		return b.String(), nil
	}
	if domain, err = unesc(parts[0]); err != nil {
		return
	}
	for _, p := range parts[1:] {
		if q, ok := strings.CutPrefix(p, "!"); ok && !strings.Contains(p, "=") {
			if qualifier, err = unesc(q); err != nil {
				return
			}
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return "", nil, "", 0, 0, w, fmt.Errorf("part %q has no '='", p)
		}
		var e entry
		if e.Key, err = unesc(k); err != nil {
			return
		}
		if e.Value, err = unesc(v); err != nil {
			return
		}
		entries = append(entries, e)
	}
	nums := strings.Split(key[end+1:], ":")
	if len(nums) != 3 {
		return "", nil, "", 0, 0, w, fmt.Errorf("bad window suffix %q", key[end+1:])
	}
	if index, a, err = parseCounter(nums[0]); err != nil {
		return
	}
	if w.Size, err = strconv.ParseInt(nums[1], 10, 64); err != nil {
		return
	}
	w.Start, err = strconv.ParseInt(nums[2], 10, 64)
	return
}

// FuzzKey checks that the key of any descriptor decodes back to exactly that
// descriptor (so distinct descriptors never share a counter), that values
// stay readable in the key, and that the hash tag covers the whole
// descriptor and nothing of the window.
func FuzzKey(f *testing.F) {
	f.Add("edge", "api_key", "alice", "path", "/v1", "", int64(60_000), int64(1_763_800_020_000))
	f.Add("a_b", "c", "d", "", "", "", int64(1), int64(0))
	f.Add("a", "b_c", "d", "x|y=z", "}{", "override", int64(1000), int64(-1000))
	f.Add("%41", "=", "|", ":", "%", "!x", int64(5), int64(10))
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2, qualifier string, size, start int64) {
		entries := []entry{{k1, v1}}
		if k2 != "" {
			entries = append(entries, entry{k2, v2})
		}
		w := Window{Start: start, Size: size}
		key := string(AppendWindow(appendKey(nil, "ratelimit", domain, entries, qualifier), w))
		gd, ge, gq, gi, ga, gw, err := parseKey(key)
		if err != nil {
			t.Fatalf("parseKey(%q): %v", key, err)
		}
		if gi != 0 || ga != FixedWindow {
			t.Fatalf("parseKey(%q) = counter %d %v, want none", key, gi, ga)
		}
		if gd != domain || gq != qualifier || gw != w || fmt.Sprint(ge) != fmt.Sprint(entries) || len(ge) != len(entries) {
			t.Fatalf("parseKey(%q) = %q %q %q %+v, want %q %q %q %+v", key, gd, ge, gq, gw, domain, entries, qualifier, w)
		}
		for i := range ge {
			if ge[i] != entries[i] {
				t.Fatalf("entry %d = %q, want %q", i, ge[i], entries[i])
			}
		}
		tag := hashTag(key)
		if !strings.HasPrefix(key, "ratelimit:{"+tag+"}:") {
			t.Fatalf("hash tag %q of %q is not the whole descriptor", tag, key)
		}
		// A value without separator bytes appears verbatim.
		if !strings.ContainsAny(v1, "%{}|=:") && !bytes.ContainsFunc([]byte(v1), func(r rune) bool { return r < 0x20 || r == 0x7f }) &&
			!strings.Contains(key, v1) {
			t.Fatalf("value %q not verbatim in %q", v1, key)
		}
	})
}

// FuzzKeyCounter checks that the counters of a descriptor's limits decode
// back to the limit's index and algorithm (so two limits of one descriptor
// never share a counter), that the first fixed-window limit keeps the
// descriptor's key, and that every counter of a descriptor has its hash
// tag, so one script call takes them all on Redis Cluster.
func FuzzKeyCounter(f *testing.F) {
	f.Add("edge", "api_key", "alice", "", uint16(0), uint8(0), int64(60_000), int64(1_763_800_020_000))
	f.Add("edge", "api_key", "alice", "", uint16(1), uint8(0), int64(60_000), int64(1_763_800_020_000))
	f.Add("edge", "k", "!1", "override", uint16(0), uint8(1), int64(60_000), int64(0))
	f.Add("d", "k", "v", "!2,sliding_window", uint16(12), uint8(1), int64(1000), int64(-1000))
	f.Fuzz(func(t *testing.T, domain, k, v, qualifier string, index uint16, alg uint8, size, start int64) {
		a := algorithms[int(alg)%len(algorithms)]
		head := appendKey(nil, "ratelimit", domain, []entry{{k, v}}, qualifier)
		w := Window{Start: start, Size: size}
		key := string(AppendWindow(AppendKeyCounter(head, int(index), a), w))
		gd, ge, gq, gi, ga, gw, err := parseKey(key)
		if err != nil {
			t.Fatalf("parseKey(%q): %v", key, err)
		}
		if gd != domain || len(ge) != 1 || ge[0] != (entry{k, v}) || gq != qualifier || gi != int(index) || ga != a || gw != w {
			t.Fatalf("parseKey(%q) = %q %q %q %d %v %+v, want %q %q %q %d %v %+v",
				key, gd, ge, gq, gi, ga, gw, domain, entry{k, v}, qualifier, index, a, w)
		}
		if index == 0 && a == FixedWindow && key != string(AppendWindow(head, w)) {
			t.Fatalf("first fixed-window limit keyed %q, want the descriptor's key %q", key, AppendWindow(head, w))
		}
		if tag := hashTag(key); tag != string(head[len("ratelimit:{"):len(head)-1]) {
			t.Fatalf("hash tag %q of %q is not the descriptor's %q", tag, key, head)
		}
	})
}

func TestAppendKeyCounter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		index int
		a     Algorithm
		want  string
	}{
		{0, FixedWindow, ""},
		{1, FixedWindow, "!1"},
		{12, FixedWindow, "!12"},
		{0, SlidingWindow, "!sliding_window"},
		{2, SlidingWindow, "!2,sliding_window"},
	}
	for _, tt := range tests {
		if got := string(AppendKeyCounter([]byte("k"), tt.index, tt.a)); got != "k"+tt.want {
			t.Errorf("AppendKeyCounter(%d, %v) = %q, want %q", tt.index, tt.a, got, "k"+tt.want)
		}
	}
}

// FuzzReferenceKey: a Reference counter's key is envoyproxy/ratelimit's
// (src/limiter/cache_key.go): prefix, domain, '_', each entry's key and
// value followed by '_', then its window start computed as the reference
// computes it, (unix seconds / unit) * unit, for every unit it has.
func FuzzReferenceKey(f *testing.F) {
	f.Add("", "edge", "api_key", "alice", "", "", uint8(1), int64(1_763_800_020_123))
	f.Add("p:", "a_b", "c", "d_", "x", "{y}", uint8(4), int64(0))
	f.Add("", "", "", "", "", "", uint8(6), int64(999))
	f.Fuzz(func(t *testing.T, prefix, domain, k1, v1, k2, v2 string, unit uint8, nowMs int64) {
		u := Unit(1 + int(unit)%7)
		if nowMs < 0 {
			nowMs = -(nowMs + 1) // the reference's arithmetic is for times after 1970
		}
		nowMs %= 1 << 50
		head := AppendReferenceEntry(AppendReferenceKey(nil, prefix, domain), k1, v1)
		want := prefix + domain + "_" + k1 + "_" + v1 + "_"
		if k2 != "" {
			head = AppendReferenceEntry(head, k2, v2)
			want += k2 + "_" + v2 + "_"
		}
		size := unitLengths[u]
		divider := int64(size / time.Second)
		want += strconv.FormatInt(nowMs/1000/divider*divider, 10)
		r := Counter{Key: string(head), Size: size, Reference: true}
		if got := string(r.AppendStoreKey(nil, nowMs)); got != want {
			t.Fatalf("AppendStoreKey(%d) with unit %v = %q, want %q", nowMs, u, got, want)
		}
	})
}
