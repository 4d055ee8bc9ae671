package result

// RLQS is what bench/rlqsload adds to its Load: the Rate Limit Quota Service load it ran and the edge
// decisions its simulated Envoys made. The Load's Calls are the usage reports (one message each) it sent in the
// measured interval, so the harness's per-decision figures are per report; Usages is the bucket usages those
// reports carried, for the per-usage figures.
type RLQS struct {
	Streams   int     `json:"streams"`    // simulated Envoys, one stream each
	Buckets   int     `json:"buckets"`    // bucket ids each stream reports
	IntervalS float64 `json:"interval_s"` // report interval
	Usages    uint64  `json:"usages"`     // bucket usages in the measured interval's reports

	Responses   uint64 `json:"responses"`    // server messages received in the measured interval
	Assignments uint64 `json:"assignments"`  // quota_assignment_action, whatever the strategy
	TokenBucket uint64 `json:"token_bucket"` // of which token_bucket strategies
	DenyAll     uint64 `json:"deny_all"`     // of which blanket DENY_ALL
	AllowAll    uint64 `json:"allow_all"`    // of which blanket ALLOW_ALL
	Abandons    uint64 `json:"abandons"`

	// LimitPerWindow requests per WindowS seconds is the rule every bucket matches; OfferedPerS is the requests
	// per second the whole fleet offers each bucket, and AdmittedPerS what it admitted, over the measured interval.
	LimitPerWindow uint64  `json:"limit_per_window"`
	WindowS        float64 `json:"window_s"`
	OfferedPerS    float64 `json:"offered_per_s_per_bucket"`
	AdmittedPerS   float64 `json:"admitted_per_s_per_bucket"`

	// Windows is the (bucket, window) pairs wholly inside the measured interval; for each, the fleet's admitted
	// requests over the limit. EpsilonMax is the largest admitted/limit − 1 (over-admission; negative when
	// every window stayed under its limit), EpsilonP50 the median, FillMin the smallest admitted/limit.
	Windows    int     `json:"windows"`
	EpsilonMax float64 `json:"epsilon_max"`
	EpsilonP50 float64 `json:"epsilon_p50"`
	FillMin    float64 `json:"fill_min"`
}

// RLQSSummary is the medians over an RLQS scenario's runs: its per-report figures are the Summary's
// per-decision ones; these are per bucket usage, and the over-admission of each run's worst window.
type RLQSSummary struct {
	Streams         int      `json:"streams"`
	Buckets         int      `json:"buckets"`
	IntervalS       float64  `json:"interval_s"`
	UsagesPerS      *float64 `json:"usages_per_s"`
	ServerCPUUsage  *float64 `json:"server_cpu_us_per_usage"`
	RedisCPUUsage   *float64 `json:"redis_cpu_us_per_usage"`
	RedisCmdsUsage  *float64 `json:"redis_commands_per_usage"`
	RoundTripsUsage *float64 `json:"round_trips_per_usage"`
	// EpsilonMax is the median over runs of each run's largest over-admission; EpsilonWorst the largest of all.
	EpsilonMax   *float64 `json:"epsilon_max"`
	EpsilonWorst *float64 `json:"epsilon_worst"`
	FillMin      *float64 `json:"fill_min"`
	Windows      int      `json:"windows"` // summed over runs
	// StoreErrors and Refused are the sidecar's failed store calls and refused usages, summed over runs.
	StoreErrors uint64 `json:"store_errors"`
	Refused     uint64 `json:"refused"`
}
