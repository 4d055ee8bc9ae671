package window

// Test-only views of unexported state, for the external tests.

// Len returns the number of live and not yet swept counters.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cells)
}

// Len returns the number of cached full counters, expired ones included
// until they are swept.
func (c *OverLimitCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.full)
}

// BucketTTL is bucketTTL: the TTL that the Redis script gives a bucket,
// which Memory derives from the bucket's state instead.
var BucketTTL = bucketTTL
