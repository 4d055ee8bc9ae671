package main

import (
	"flag"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
)

// refKeysConfig is -reference-keys and its settings: the counters of the
// limits envoyproxy/ratelimit can express in its Redis keys, shared with it
// during a migration (docs/deployment.md#migrating-from-envoyproxyratelimit).
type refKeysConfig struct {
	enabled bool
	prefix  string        // CACHE_KEY_PREFIX, verbatim
	jitter  time.Duration // EXPIRATION_JITTER_MAX_SECONDS
}

func (c *refKeysConfig) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "reference-keys", false, "with Redis: count fixed-window limits of one unit in envoyproxy/ratelimit's keys, as it counts with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, so both share counters during a migration; other limits keep this project's keys")
	fs.StringVar(&c.prefix, "reference-key-prefix", "", "with -reference-keys: the reference's CACHE_KEY_PREFIX, which starts its keys verbatim")
	fs.DurationVar(&c.jitter, "reference-key-jitter", config.DefaultReferenceKeyJitter, "with -reference-keys: most random time added to a counter's TTL, whole seconds (the reference's EXPIRATION_JITTER_MAX_SECONDS)")
}

// check reports a bad jitter.
func (c *refKeysConfig) check() error {
	if c.jitter < 0 || c.jitter%time.Second != 0 {
		return fmt.Errorf("-reference-key-jitter %v: want whole seconds, >= 0", c.jitter)
	}
	return nil
}

// options returns the server's ReferenceKeys: nil when off, or without
// Redis, where no reference server can share the counters; it logs which
// limits the layout covers, and which it does not, once at start.
func (c *refKeysConfig) options(redis bool, log *zap.Logger) *envoyrls.ReferenceKeys {
	if !c.enabled {
		return nil
	}
	if !redis {
		log.Warn("-reference-keys: not used with the in-memory store; counters are shared only through Redis")
		return nil
	}
	log.Info("-reference-keys: fixed-window limits of one unit (the first limit of a descriptor, and Envoy's limit overrides) count in envoyproxy/ratelimit's keys, shared with it; "+
		"limits with unit_multiplier > 1, other algorithms, and second and later limits of a descriptor keep this project's keys and are not shared",
		zap.String("prefix", c.prefix), zap.Duration("jitter_max", c.jitter))
	return &envoyrls.ReferenceKeys{Prefix: c.prefix, JitterMax: c.jitter}
}
