package result

// Summary is the medians over a scenario's successful harness runs, as results.json holds them beside the
// scenario's name and label; the capacity model reads the same type. A nil figure is one the runs did not have
// (a server without Redis, a server that exports no round-trip count). CPU is in µs per decision, memory in MiB.
type Summary struct {
	Runs       int       `json:"runs"`
	Failed     int       `json:"failed"`
	Errors     uint64    `json:"errors"` // summed over runs
	OK         uint64    `json:"ok"`
	OverLimit  uint64    `json:"over_limit"`
	Decisions  *float64  `json:"decisions_per_s"`
	DecMin     *float64  `json:"decisions_per_s_min"`
	DecMax     *float64  `json:"decisions_per_s_max"`
	P50Us      *float64  `json:"p50_us"`
	P99Us      *float64  `json:"p99_us"`
	P999Us     *float64  `json:"p999_us"`
	ServerCPU  *float64  `json:"server_cpu_us_per_decision"`
	LoadgenCPU *float64  `json:"loadgen_cpu_us_per_decision"`
	RedisCPU   *float64  `json:"redis_cpu_us_per_decision"`
	RedisCmds  *float64  `json:"redis_commands_per_decision"`
	RoundTrips *float64  `json:"round_trips_per_decision"`
	RedisBytes *float64  `json:"redis_bytes_per_decision"`
	ServerIO   *float64  `json:"server_io_bytes_per_decision"`
	RSSBefore  *float64  `json:"server_rss_mib_before"`
	RSSEnd     *float64  `json:"server_rss_mib_end"`
	RedisMemB  *float64  `json:"redis_used_memory_mib_before"`
	RedisMemE  *float64  `json:"redis_used_memory_mib_end"`
	PerRun     []float64 `json:"decisions_per_s_per_run"`
	KeySpace   *KeySpace `json:"key_space,omitempty"`
	// ByCommand is the median over runs of each Redis command's calls per decision.
	ByCommand map[string]float64 `json:"redis_commands_per_decision_by_command,omitempty"`
	// RLQS is an RLQS scenario's per-usage figures and over-admission.
	RLQS *RLQSSummary `json:"rlqs,omitempty"`
}

// KeySpace is the medians of a key-space scenario's runs (million, million-sliding): Redis memory per live
// counter and the server's RSS over the measured interval.
type KeySpace struct {
	Values      int      `json:"values"`
	KeysPerVal  *float64 `json:"redis_keys_per_value"`
	MemEmptyMiB *float64 `json:"redis_used_memory_mib_empty"`
	MemEndMiB   *float64 `json:"redis_used_memory_mib_end"`
	BytesPerKey *float64 `json:"redis_bytes_per_key"`
	MemoryUsage *float64 `json:"memory_usage_bytes_per_key"`
	SampledKeys int      `json:"sampled_keys"`
	KeyExample  string   `json:"key_example"`
	RSSStartMiB *float64 `json:"server_rss_mib_start"`
	RSSEndMiB   *float64 `json:"server_rss_mib_end"`
	RSSMaxMiB   *float64 `json:"server_rss_mib_max"`
	Samples     int      `json:"server_rss_samples_measured"` // the last run's
}
